// Ranks that call the same op with different arguments fail it on every rank with
// WEFT_ERR_INVALID_USAGE (asynchronously, on the stream), long before the timeout, naming both
// ranks and the field, with nothing written into the output: each protocol a GPU op takes (the
// one-shot AllReduce, reduce-scatter + all-gather, All-to-All, the fused GEMV's flagged exchange).
// The CPU suite (tests/cpu/test_disagree.cpp) covers every case; these are the GPU kernels' checks.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "gpu_support.hpp"
#include "support/multirank.hpp"

namespace weft::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kHeapBytes = 8 << 20;
constexpr double kTimeoutS = 20;  // a check that failed would show as this timeout

class GpuDisagree : public OnEveryBackend {};

// Every rank enqueues its op (`enqueue(r, rank)`; rank 0's differs from the others'), which must
// fail on the stream: every rank's async error is WEFT_ERR_INVALID_USAGE naming `field`, the rank
// itself and rank 0 (the one that differs) or, on rank 0, a peer, found well before the timeout;
// and the heap block the op would write is untouched. `gemvPath`: WEFT_GEMV_PATH, where given.
void disagree(int gpus, const std::string& field, const std::function<void(const Rank&, int)>& enqueue,
              const char* gemvPath = nullptr) {
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    if (gemvPath) setenv("WEFT_GEMV_PATH", gemvPath, 1);
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.timeout_s = kTimeoutS;
    Rank r = setUp(rank, n, id, kHeapBytes, &config);
    ASSERT_NE(r.comm, nullptr);
    WEFT_CUDA_OK(cudaMemset(r.heap, 0xff, kHeapBytes));
    WEFT_CUDA_OK(cudaMemset(r.input, 0, kHeapBytes));
    WEFT_CUDA_OK(cudaDeviceSynchronize());
    const auto start = Clock::now();
    enqueue(r, rank);
    EXPECT_EQ(cudaStreamSynchronize(r.stream), cudaSuccess);
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_LT(took, kTimeoutS / 4) << "found by the timeout, not by the signatures";
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(r.comm, &async));
    const std::string msg = weft_get_last_error(nullptr);
    EXPECT_EQ(async, WEFT_ERR_INVALID_USAGE) << msg;
    EXPECT_NE(msg.find(field), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(rank) + " "), std::string::npos) << msg;
    EXPECT_NE(msg.find(rank == 0 ? std::string(" and rank ") : std::string("rank 0 ")), std::string::npos) << msg;
    const std::vector<uint8_t> out = toHost(r.heap, kHeapBytes);
    size_t written = 0;
    for (uint8_t b : out) written += b != 0xff;
    EXPECT_EQ(written, 0u) << "bytes of the output were written";
    weft_comm_destroy(r.comm);
    cudaFree(r.input);
    cudaStreamDestroy(r.stream);
  };
  EXPECT_TRUE(runRanks(gpus, body, 120));
}

// One-shot (small) and reduce-scatter + all-gather (large) AllReduce with counts that differ.
TEST_P(GpuDisagree, AllReduceCounts) {
  for (int64_t count : {int64_t{1000}, int64_t{1} << 20})
    disagree(ranks(), "count", [&](const Rank& r, int rank) {
      WEFT_ASSERT_OK(weft_allreduce(r.comm, r.input, r.heap, count + (rank == 0 ? 0 : 64), WEFT_FLOAT32, r.stream));
    });
}

// A count of 0 against one: the empty op still meets its peers.
TEST_P(GpuDisagree, AllReduceCountZeroAgainstSome) {
  disagree(ranks(), "count", [&](const Rank& r, int rank) {
    WEFT_ASSERT_OK(weft_allreduce(r.comm, r.input, r.heap, rank == 0 ? 0 : 4096, WEFT_FLOAT32, r.stream));
  });
}

TEST_P(GpuDisagree, AllReduceDtype) {
  disagree(ranks(), "dtype", [&](const Rank& r, int rank) {
    WEFT_ASSERT_OK(
        weft_allreduce(r.comm, r.input, r.heap, 1 << 16, rank == 0 ? WEFT_FLOAT32 : WEFT_BFLOAT16, r.stream));
  });
}

// An All-to-All on rank 0 where the others call an AllReduce.
TEST_P(GpuDisagree, AllToAllAgainstAllReduce) {
  disagree(ranks(), "the op kind", [&](const Rank& r, int rank) {
    if (rank == 0)
      WEFT_ASSERT_OK(weft_alltoall(r.comm, r.input, r.heap, 4096, WEFT_FLOAT32, r.stream));
    else
      WEFT_ASSERT_OK(weft_allreduce(r.comm, r.input, r.heap, 4096, WEFT_FLOAT32, r.stream));
  });
}

// The fused GEMV + AllReduce where rank 0 has another n: its reduce items compare the words.
TEST_P(GpuDisagree, GemvAllReduceShape) {
  disagree(
      ranks(), "the shape",
      [&](const Rank& r, int rank) {
        const int64_t k = 1024, n = rank == 0 ? 1024 : 2048;
        // x then w, both zero, from the rank's ordinary device buffer.
        const auto* x = static_cast<const uint8_t*>(r.input);
        WEFT_ASSERT_OK(weft_gemv_allreduce(r.comm, x, x + 4096, r.heap, 1, n, k, WEFT_BFLOAT16, r.stream));
      },
      "fused");
}

WEFT_INSTANTIATE_ON_EVERY_BACKEND(GpuDisagree, {2, 4});

}  // namespace
}  // namespace weft::test
