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

class GpuCollectives : public GpusAndEngine {};

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

// The one-shot AllReduce in each wire format at every size (auto picks by size), back to back so
// that both parities of the scratch are reused: lines that end mid-line, one line, many per item.
TEST_P(GpuCollectives, OneShotInEitherWireFormat) {
  WEFT_REQUIRE_GPUS(gpus());
  const uint64_t seed = freshSeed();
  for (const char* protocol : {"ll", "ll128"}) {
    SCOPED_TRACE(protocol);
    const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
      setenv("WEFT_ONESHOT_PROTOCOL", protocol, 1);
      setenv("WEFT_ONESHOT_MAX_BYTES", "1M", 1);
      Rank r = setUp(rank, n, id, 1 << 20);
      ASSERT_NE(r.comm, nullptr);
      uint64_t s = seed;
      for (weft_dtype_t dt : kDtypes)
        for (int64_t count : {1, 7, 30, 31, 61, 1237, 65539, 262139})
          if (count * dtypeBytes(dt) <= (1 << 20)) allReduceCase(r, rank, n, dt, count, ++s, count % 2 == 0);
      tearDown(r);
    };
    EXPECT_TRUE(runRanks(gpus(), body));
  }
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

// A CUDA graph of weft ops and the caller's kernel replays correctly again and again, with fresh
// inputs each time and eager ops of the same communicator in between (the protocol counters are
// read on the device at each replay).
TEST_P(GpuCollectives, GraphCaptureAndReplay) {
  WEFT_REQUIRE_GPUS(gpus());
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    constexpr int64_t kSmall = 1237, kLarge = 1000003, kBlock = 4099;
    // Element offsets of the three ops' buffers: one-shot AllReduce, multi-tile AllReduce, All-to-All.
    const int64_t at[] = {0, 2048, 2048 + 1000448};
    Rank r = setUp(rank, n, id, (at[2] + kBlock * n) * 4);
    ASSERT_NE(r.comm, nullptr);
    auto* in = static_cast<float*>(r.input);
    auto* out = static_cast<float*>(r.heap);
    float* scaled = nullptr;
    WEFT_CUDA_OK(cudaMalloc(&scaled, kSmall * 4));
    // An eager op first, so that the graph does not run on the initial counters.
    allReduceCase(r, rank, n, WEFT_FLOAT32, kSmall, seed, false);
    const cudaGraphExec_t exec = captureGraph(r.stream, [&] {
      WEFT_ASSERT_OK(weft_allreduce(r.comm, in + at[0], out + at[0], kSmall, WEFT_FLOAT32, r.stream));
      launchScale(scaled, out + at[0], 0.5f, kSmall, r.stream);
      WEFT_ASSERT_OK(weft_allreduce(r.comm, in + at[1], out + at[1], kLarge, WEFT_FLOAT32, r.stream));
      WEFT_ASSERT_OK(weft_alltoall(r.comm, in + at[2], out + at[2], kBlock, WEFT_FLOAT32, r.stream));
    });
    ASSERT_NE(exec, nullptr);
    for (int replay = 0; replay < 3; ++replay) {
      SCOPED_TRACE(::testing::Message() << "replay " << replay);
      const uint64_t s = seed + 10 * (replay + 1);
      toDevice(in + at[0], hostInput(WEFT_FLOAT32, s, rank, kSmall));
      toDevice(in + at[1], hostInput(WEFT_FLOAT32, s + 1, rank, kLarge));
      toDevice(in + at[2], hostInput(WEFT_FLOAT32, s + 2, rank, kBlock * n));
      poisonDevice(out, (at[2] + kBlock * n) * 4);
      WEFT_CUDA_OK(cudaGraphLaunch(exec, r.stream));
      WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
      const std::vector<uint8_t> small = toHost(out + at[0], kSmall * 4);
      EXPECT_TRUE(checkAllReduce(small.data(), WEFT_FLOAT32, s, n, kSmall));
      EXPECT_TRUE(checkAllReduce(toHost(out + at[1], kLarge * 4).data(), WEFT_FLOAT32, s + 1, n, kLarge));
      EXPECT_TRUE(checkAllToAll(toHost(out + at[2], kBlock * n * 4).data(), WEFT_FLOAT32, s + 2, rank, n, kBlock));
      const std::vector<uint8_t> half = toHost(scaled, kSmall * 4);
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
    tearDown(r);
  };
  EXPECT_TRUE(runRanks(gpus(), body));
}

WEFT_INSTANTIATE_GPUS_AND_ENGINES(GpuCollectives);

}  // namespace
}  // namespace weft::test
