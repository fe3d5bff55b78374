// AllReduce and All-to-All on 1, 2 and 4 GPUs (a process per GPU), the CPU suite's cases with
// buffers in device memory and ops ordered on a stream. Skipped (and reported so) without GPUs.
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_support.hpp"
#include "support/multirank.hpp"
#include "support/oracle.hpp"

namespace weft::test {
namespace {

constexpr weft_dtype_t kDtypes[] = {WEFT_FLOAT32, WEFT_FLOAT16, WEFT_BFLOAT16};

struct Rank {
  weft_comm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* heap = nullptr;   // output, symmetric heap
  void* input = nullptr;  // ordinary device memory
};

// The engine under test: "launched" (default) or "persistent", which needs modules loaded eagerly
// (a lazily loaded kernel can wait for a resident one; see docs/design-notes.md). Set before CUDA
// starts in this rank's process.
std::string gEngine = "launched";

Rank setUp(int rank, int n, const weft_unique_id_t& id, size_t bytes, const weft_config_t* config = nullptr) {
  Rank r;
  setenv("WEFT_ENGINE", gEngine.c_str(), 1);
  if (gEngine == "persistent") setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  EXPECT_EQ(cudaSetDevice(rank % gpusPresent()), cudaSuccess);
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

std::vector<uint8_t> hostInput(weft_dtype_t dt, uint64_t seed, int rank, uint64_t count) {
  std::vector<uint8_t> v(count * dtypeBytes(dt));
  fillInput(v.data(), dt, seed, rank, 0, count);
  return v;
}

void poisonDevice(void* p, size_t bytes) { EXPECT_EQ(cudaMemset(p, 0xff, bytes), cudaSuccess); }

void allReduceCase(Rank& r, int rank, int n, weft_dtype_t dt, int64_t count, uint64_t seed, bool inPlace) {
  SCOPED_TRACE(::testing::Message() << "AllReduce " << dtypeName(dt) << " count " << count
                                    << (inPlace ? " in place" : "") << " seed " << seed);
  const size_t bytes = count * dtypeBytes(dt);
  toDevice(inPlace ? r.heap : r.input, hostInput(dt, seed, rank, count));
  if (!inPlace) poisonDevice(r.heap, bytes);
  WEFT_ASSERT_OK(weft_allreduce(r.comm, inPlace ? r.heap : r.input, r.heap, count, dt, r.stream));
  WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
  EXPECT_TRUE(checkAllReduce(toHost(r.heap, bytes).data(), dt, seed, n, count));
}

void allToAllCase(Rank& r, int rank, int n, weft_dtype_t dt, int64_t count, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "All-to-All " << dtypeName(dt) << " count " << count << " seed " << seed);
  const size_t bytes = count * n * dtypeBytes(dt);
  toDevice(r.input, hostInput(dt, seed, rank, count * n));
  poisonDevice(r.heap, bytes);
  WEFT_ASSERT_OK(weft_alltoall(r.comm, r.input, r.heap, count, dt, r.stream));
  WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
  EXPECT_TRUE(checkAllToAll(toHost(r.heap, bytes).data(), dt, seed, rank, n, count));
}

// (GPUs, engine)
class GpuCollectives : public ::testing::TestWithParam<std::tuple<int, std::string>> {
 protected:
  void SetUp() override { gEngine = std::get<1>(GetParam()); }
  int gpus() const { return std::get<0>(GetParam()); }
};

TEST_P(GpuCollectives, EveryDtypeAndCount) {
  WEFT_REQUIRE_GPUS(gpus());
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    Rank r = setUp(rank, n, id, 100003 * 4 * n);
    ASSERT_NE(r.comm, nullptr);
    uint64_t s = seed;
    for (weft_dtype_t dt : kDtypes)
      for (int64_t count : {0, 1, 7, 1237, 100003}) {
        allReduceCase(r, rank, n, dt, count, ++s, false);
        allReduceCase(r, rank, n, dt, count, ++s, true);
        allToAllCase(r, rank, n, dt, count, ++s);
      }
    tearDown(r);
  };
  EXPECT_TRUE(runRanks(gpus(), body));
}

TEST_P(GpuCollectives, SixtyFourMiB) {
  WEFT_REQUIRE_GPUS(gpus());
  const uint64_t seed = freshSeed();
  const int64_t count = int64_t{16} << 20;
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    Rank r = setUp(rank, n, id, count * 4);
    ASSERT_NE(r.comm, nullptr);
    allReduceCase(r, rank, n, WEFT_FLOAT32, count, seed, false);
    allReduceCase(r, rank, n, WEFT_BFLOAT16, count, seed + 1, true);
    allToAllCase(r, rank, n, WEFT_FLOAT32, count / n, seed + 2);
    tearDown(r);
  };
  EXPECT_TRUE(runRanks(gpus(), body));
}

// The op starts after the caller's earlier kernel and the caller's later kernel sees its result;
// many ops in flight at once, none synchronised until the end.
TEST_P(GpuCollectives, StreamOrderWithTheCallersKernels) {
  WEFT_REQUIRE_GPUS(gpus());
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    constexpr int kOps = 24;
    constexpr size_t kCount = 1 << 18;
    Rank r = setUp(rank, n, id, kCount * 4 * kOps);
    ASSERT_NE(r.comm, nullptr);
    float* scaled = nullptr;
    WEFT_CUDA_OK(cudaMalloc(&scaled, kCount * 4 * kOps));
    auto* in = static_cast<float*>(r.input);
    auto* out = static_cast<float*>(r.heap);
    for (int op = 0; op < kOps; ++op) {
      launchFill(in + op * kCount, static_cast<float>(rank + 1 + op), kCount, r.stream);
      WEFT_ASSERT_OK(weft_allreduce(r.comm, in + op * kCount, out + op * kCount, kCount, WEFT_FLOAT32, r.stream));
      launchScale(scaled + op * kCount, out + op * kCount, 0.5f, kCount, r.stream);
    }
    WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
    std::vector<float> host(kCount * kOps);
    WEFT_CUDA_OK(cudaMemcpy(host.data(), scaled, host.size() * 4, cudaMemcpyDeviceToHost));
    int64_t wrong = 0;
    for (int op = 0; op < kOps; ++op) {
      const float want = 0.5f * (n * (n + 1) / 2.0f + n * op);
      for (size_t i = 0; i < kCount; ++i) wrong += host[op * kCount + i] != want;
    }
    EXPECT_EQ(wrong, 0);
    cudaFree(scaled);
    tearDown(r);
  };
  EXPECT_TRUE(runRanks(gpus(), body));
}

INSTANTIATE_TEST_SUITE_P(Gpus, GpuCollectives,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(std::string("launched"), std::string("persistent"))),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "gpus_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace weft::test
