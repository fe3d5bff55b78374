// The GPU side of tests/support/op_rank.hpp: buffers in device memory (the heap in host memory
// where a proxy job puts it there), ops on the rank's stream, ranks on GPUs round-robin.
#include "gpu_support.hpp"
#include "support/op_rank.hpp"

namespace weft::test {

std::vector<Placement> backendPlacements(std::vector<int> ranks) {
  std::vector<Placement> out;
  for (int n : ranks)
    for (const char* engine : {"launched", "persistent"}) out.push_back(Placement{n, engine});
  return out;
}

std::vector<Placement> backendPlacements() { return backendPlacements({1, 2, 4}); }

std::string placementName(const ::testing::TestParamInfo<Placement>& info) {
  return std::to_string(info.param.ranks) + "gpus_" + info.param.engine;
}

std::string cannotRun(const Placement& placement) {
  const int present = gpusPresent();
  if (present >= (sharingGpus() ? 1 : placement.ranks)) return {};
  return "needs " + std::to_string(placement.ranks) + " GPU(s), this machine has " + std::to_string(present) +
         (present ? " (WEFT_TEST_SHARE_GPUS=1 runs ranks on shared GPUs, under MPS)" : "");
}

void OnEveryBackend::SetUp() {
  if (const std::string why = cannotRun(GetParam()); !why.empty()) GTEST_SKIP() << why;
  gEngine = GetParam().engine;
}

OpRank openRank(int rank, int ranks, const weft_unique_id_t& id, size_t bytes, const weft_config_t* config) {
  Rank g = setUp(rank, ranks, id, bytes, config);
  return OpRank{g.comm, g.stream, g.heap, g.input};
}

void closeRank(OpRank& r) {
  Rank g{r.comm, static_cast<cudaStream_t>(r.stream), r.heap, r.input};
  tearDown(g);
  r = OpRank{};
}

void closeFailedRank(OpRank& r) {
  EXPECT_EQ(weft_comm_destroy(r.comm), WEFT_SUCCESS) << weft_get_last_error(nullptr);
  cudaFree(r.input);
  cudaStreamDestroy(static_cast<cudaStream_t>(r.stream));
  r = OpRank{};
}

::testing::AssertionResult finish(const OpRank& r) {
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(r.stream));
  if (e != cudaSuccess) return ::testing::AssertionFailure() << "cudaStreamSynchronize: " << cudaGetErrorString(e);
  return opsSucceeded(r.comm);
}

void upload(void* dst, const void* src, size_t bytes) {
  if (bytes) {
    EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), cudaSuccess);
  }
}

std::vector<uint8_t> download(const void* src, size_t bytes) { return toHost(src, bytes); }

void poisonBytes(void* dst, size_t bytes) {
  if (bytes) {
    EXPECT_EQ(cudaMemset(dst, 0xff, bytes), cudaSuccess);
  }
}

BackendCopies::BackendCopies() = default;
BackendCopies::~BackendCopies() {
  for (void* p : buffers_) cudaFree(p);
}

void* BackendCopies::copyBytes(const void* src, size_t bytes) {
  if (!bytes) return nullptr;
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  buffers_.push_back(p);
  return p;
}

}  // namespace weft::test
