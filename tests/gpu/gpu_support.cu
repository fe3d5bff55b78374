#include "gpu_support.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "common/gpus_visible.hpp"
#include "support/multirank.hpp"

namespace weft::test {

namespace {

// Whether this process has loaded the CUDA driver (the runtime loads it at its first call).
bool driverLoaded() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libcuda.so") != std::string::npos) return true;
  return false;
}

// A rank forked after the test process itself used CUDA cannot use it (cudaSetDevice fails with an
// initialization error): one test that calls CUDA outside its ranks fails every later test of the
// run, far from the cause. This names the test that did. A driver already loaded when the run
// starts leaves the check off (it could not tell who loaded it).
class CudaOnlyInRanks : public ::testing::EmptyTestEventListener {
  bool armed_ = false;
  void OnTestProgramStart(const ::testing::UnitTest&) override { armed_ = !driverLoaded(); }
  void OnTestEnd(const ::testing::TestInfo& test) override {
    if (!armed_ || !driverLoaded()) return;
    armed_ = false;
    ADD_FAILURE() << test.test_suite_name() << "." << test.name()
                  << " used CUDA in the test process itself, so no rank forked after it can: make its CUDA "
                     "calls inside runRanks";
  }
};
const bool kCudaOnlyInRanks = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new CudaOnlyInRanks);
  return true;
}();

}  // namespace

// Counted, not asked of CUDA, so that the parent initialises no CUDA context before it forks the
// ranks.
int gpusPresent() { return nvidiaGpusVisible(); }

bool sharingGpus() {
  const char* v = getenv("WEFT_TEST_SHARE_GPUS");
  return v && strcmp(v, "1") == 0;
}

std::string gEngine = "launched";

void useGpu(int rank, int n) {
  const int gpus = gpusPresent();
  ASSERT_GT(gpus, 0);
  const int sharers = ranksPerGpu(n, gpus);
  if (sharingGpus() && sharers > 1 && !getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"))
    setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(mpsSharePercent(n, gpus)).c_str(), 1);
  // Under MPS a kernel's first launch (lazy loading) waits for the device to drain, the peers'
  // spinning kernels included: the suite's own kernels load at the rank's start instead, as
  // weftrun has every rank's (unless the environment says otherwise).
  if (sharingGpus() && sharers > 1) setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  ASSERT_EQ(cudaSetDevice(rank % gpus), cudaSuccess);
}

Rank setUp(int rank, int n, const weft_unique_id_t& id, size_t bytes, const weft_config_t* config) {
  Rank r;
  setenv("WEFT_ENGINE", gEngine.c_str(), 1);
  // The persistent kernel holds its stream's hardware queue: the rank's streams must not share it
  // (docs/design-notes.md, "The persistent engine and the GPU's hardware queues").
  if (gEngine == "persistent") {
    setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
  }
  useGpu(rank, n);
  r.comm = initRank(rank, n, id, config);
  EXPECT_EQ(cudaStreamCreate(&r.stream), cudaSuccess);
  if (r.comm) {
    EXPECT_EQ(weft_mem_alloc(r.comm, bytes, &r.heap), WEFT_SUCCESS) << weft_get_last_error(nullptr);
  }
  EXPECT_EQ(cudaMalloc(&r.input, bytes), cudaSuccess);
  return r;
}

void tearDown(Rank& r) {
  EXPECT_EQ(weft_comm_finalize(r.comm), WEFT_SUCCESS) << weft_get_last_error(nullptr);
  EXPECT_EQ(weft_mem_free(r.comm, r.heap), WEFT_SUCCESS);
  EXPECT_EQ(weft_comm_destroy(r.comm), WEFT_SUCCESS);
  cudaFree(r.input);
  cudaStreamDestroy(r.stream);
}

cudaGraphExec_t captureGraph(cudaStream_t s, const std::function<void()>& enqueue) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  enqueue();
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  if (graph) {
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    cudaGraphDestroy(graph);
  }
  return exec;
}

void toDevice(void* dst, const std::vector<uint8_t>& src) {
  if (!src.empty()) WEFT_CUDA_OK(cudaMemcpy(dst, src.data(), src.size(), cudaMemcpyDefault));
}

std::vector<uint8_t> toHost(const void* src, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  if (bytes) EXPECT_EQ(cudaMemcpy(out.data(), src, bytes, cudaMemcpyDefault), cudaSuccess);
  return out;
}

namespace {
__global__ void scaleKernel(float* out, const float* in, float f, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i] * f;
}
__global__ void fillKernel(float* out, float v, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = v;
}
// Returns once *open is nonzero or `limitNs` has passed (a bounded wait, whatever the test does).
__global__ void gateKernel(const volatile uint32_t* open, uint64_t limitNs) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    if (*open) return;
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < limitNs);
}
}  // namespace

void launchGate(const uint32_t* open, double limitS, cudaStream_t s) {
  gateKernel<<<1, 1, 0, s>>>(open, static_cast<uint64_t>(limitS * 1e9));
}

void launchScale(float* out, const float* in, float factor, size_t n, cudaStream_t s) {
  scaleKernel<<<128, 256, 0, s>>>(out, in, factor, n);
}
void launchFill(float* out, float value, size_t n, cudaStream_t s) { fillKernel<<<128, 256, 0, s>>>(out, value, n); }

}  // namespace weft::test
