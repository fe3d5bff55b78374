// AllReduce and All-to-All with the caller's own GPU work (their cases on every backend are
// tests/ops/test_collectives.cpp): stream order with the caller's kernels, and CUDA graphs of weft
// ops replayed with fresh inputs. Skipped (and reported so) without GPUs.
#include <vector>

#include "gpu_support.hpp"
#include "ops/collective_cases.hpp"

namespace weft::test {
namespace {

class GpuCollectives : public OnEveryBackend {};

// The op starts after the caller's earlier kernel and the caller's later kernel sees its result;
// many ops in flight at once, none synchronised until the end.
TEST_P(GpuCollectives, StreamOrderWithTheCallersKernels) {
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    constexpr int kOps = 24;
    constexpr size_t kCount = 1 << 18;
    OpRank r = openRank(rank, n, id, kCount * 4 * kOps);
    ASSERT_NE(r.comm, nullptr);
    float* scaled = nullptr;
    WEFT_CUDA_OK(cudaMalloc(&scaled, kCount * 4 * kOps));
    auto* in = static_cast<float*>(r.input);
    auto* out = static_cast<float*>(r.heap);
    for (int op = 0; op < kOps; ++op) {
      launchFill(in + op * kCount, static_cast<float>(rank + 1 + op), kCount, streamOf(r));
      WEFT_ASSERT_OK(weft_allreduce(r.comm, in + op * kCount, out + op * kCount, kCount, WEFT_FLOAT32, r.stream));
      launchScale(scaled + op * kCount, out + op * kCount, 0.5f, kCount, streamOf(r));
    }
    WEFT_CUDA_OK(cudaStreamSynchronize(streamOf(r)));
    std::vector<float> host(kCount * kOps);
    WEFT_CUDA_OK(cudaMemcpy(host.data(), scaled, host.size() * 4, cudaMemcpyDeviceToHost));
    int64_t wrong = 0;
    for (int op = 0; op < kOps; ++op) {
      const float want = 0.5f * (n * (n + 1) / 2.0f + n * op);
      for (size_t i = 0; i < kCount; ++i) wrong += host[op * kCount + i] != want;
    }
    EXPECT_EQ(wrong, 0);
    cudaFree(scaled);
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

// A CUDA graph of weft ops and the caller's kernel replays correctly again and again, with fresh
// inputs each time and eager ops of the same communicator in between (the protocol counters are
// read on the device at each replay). Its ops take every form: a one-shot and a multi-tile
// AllReduce, a direct All-to-All, and, small enough for one trip through the host proxy, a tiny
// AllReduce and All-to-All (there one-shot and staged, both on the one-shot epoch).
TEST_P(GpuCollectives, GraphCaptureAndReplay) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    constexpr int64_t kSmall = 1237, kLarge = 1000003, kBlock = 4099, kTiny = 100, kTinyBlock = 50;
    // Element offsets of the ops' buffers: one-shot AllReduce, multi-tile AllReduce, All-to-All,
    // tiny AllReduce, tiny All-to-All.
    const int64_t at[] = {0, 2048, 2048 + 1000448, 2048 + 1000448 + kBlock * n, 2048 + 1000448 + kBlock * n + 128};
    const int64_t elems = at[4] + kTinyBlock * n;
    OpRank r = openRank(rank, n, id, elems * 4);
    ASSERT_NE(r.comm, nullptr);
    auto* in = static_cast<float*>(r.input);
    auto* out = static_cast<float*>(r.heap);
    float* scaled = nullptr;
    WEFT_CUDA_OK(cudaMalloc(&scaled, kSmall * 4));
    // An eager op first, so that the graph does not run on the initial counters.
    allReduceCase(r, rank, n, WEFT_FLOAT32, kSmall, seed, false);
    const cudaGraphExec_t exec = captureGraph(streamOf(r), [&] {
      WEFT_ASSERT_OK(weft_allreduce(r.comm, in + at[0], out + at[0], kSmall, WEFT_FLOAT32, r.stream));
      launchScale(scaled, out + at[0], 0.5f, kSmall, streamOf(r));
      WEFT_ASSERT_OK(weft_allreduce(r.comm, in + at[1], out + at[1], kLarge, WEFT_FLOAT32, r.stream));
      WEFT_ASSERT_OK(weft_alltoall(r.comm, in + at[2], out + at[2], kBlock, WEFT_FLOAT32, r.stream));
      WEFT_ASSERT_OK(weft_allreduce(r.comm, in + at[3], out + at[3], kTiny, WEFT_FLOAT32, r.stream));
      WEFT_ASSERT_OK(weft_alltoall(r.comm, in + at[4], out + at[4], kTinyBlock, WEFT_FLOAT32, r.stream));
    });
    ASSERT_NE(exec, nullptr);
    for (int replay = 0; replay < 3; ++replay) {
      SCOPED_TRACE(::testing::Message() << "replay " << replay);
      const uint64_t s = seed + 10 * (replay + 1);
      upload(in + at[0], hostInput(WEFT_FLOAT32, s, rank, kSmall));
      upload(in + at[1], hostInput(WEFT_FLOAT32, s + 1, rank, kLarge));
      upload(in + at[2], hostInput(WEFT_FLOAT32, s + 2, rank, kBlock * n));
      upload(in + at[3], hostInput(WEFT_FLOAT32, s + 5, rank, kTiny));
      upload(in + at[4], hostInput(WEFT_FLOAT32, s + 6, rank, kTinyBlock * n));
      poisonBytes(out, elems * 4);
      WEFT_CUDA_OK(cudaGraphLaunch(exec, streamOf(r)));
      WEFT_CUDA_OK(cudaStreamSynchronize(streamOf(r)));
      const std::vector<uint8_t> small = download(out + at[0], kSmall * 4);
      EXPECT_TRUE(checkAllReduce(small.data(), WEFT_FLOAT32, s, n, kSmall));
      EXPECT_TRUE(checkAllReduce(download(out + at[1], kLarge * 4).data(), WEFT_FLOAT32, s + 1, n, kLarge));
      EXPECT_TRUE(checkAllToAll(download(out + at[2], kBlock * n * 4).data(), WEFT_FLOAT32, s + 2, rank, n, kBlock));
      EXPECT_TRUE(checkAllReduce(download(out + at[3], kTiny * 4).data(), WEFT_FLOAT32, s + 5, n, kTiny));
      EXPECT_TRUE(
          checkAllToAll(download(out + at[4], kTinyBlock * n * 4).data(), WEFT_FLOAT32, s + 6, rank, n, kTinyBlock));
      const std::vector<uint8_t> half = download(scaled, kSmall * 4);
      const auto* y = reinterpret_cast<const float*>(small.data());
      const auto* h = reinterpret_cast<const float*>(half.data());
      int64_t wrong = 0;
      for (int64_t i = 0; i < kSmall; ++i) wrong += h[i] != 0.5f * y[i];
      EXPECT_EQ(wrong, 0) << "the caller's kernel in the graph saw the op's result";
      // Eager ops between replays move the same counters.
      allToAllCase(r, rank, n, WEFT_BFLOAT16, 777, s + 3);
      allReduceCase(r, rank, n, WEFT_FLOAT16, 100003, s + 4, true);
    }
    WEFT_CUDA_OK(cudaGraphExecDestroy(exec));
    cudaFree(scaled);
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

WEFT_INSTANTIATE_ON_EVERY_BACKEND(GpuCollectives);

}  // namespace
}  // namespace weft::test
