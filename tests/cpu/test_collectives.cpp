// AllReduce and All-to-All on 1-4 ranks (separate processes), every dtype, counts 0, 1, odd and
// multi-tile, in and out of place, against a float64 reference on fresh random data.
#include <cstdlib>
#include <vector>

#include "support/multirank.hpp"
#include "support/oracle.hpp"

namespace weft::test {
namespace {

// One rank's buffers: the output in the symmetric heap, the input in ordinary memory.
struct Buffers {
  void* heap = nullptr;
  std::vector<uint8_t> input;
};

void allReduceCase(weft_comm_t comm, Buffers& b, int rank, int nranks, weft_dtype_t dt, int64_t count, uint64_t seed,
                   bool inPlace) {
  SCOPED_TRACE(::testing::Message() << "AllReduce " << dtypeName(dt) << " count " << count
                                    << (inPlace ? " in place" : "") << " seed " << seed);
  const size_t bytes = count * dtypeBytes(dt);
  b.input.resize(bytes);
  void* send = b.input.data();
  if (inPlace) {
    fillInput(b.heap, dt, seed, rank, 0, count);
    send = b.heap;
  } else {
    fillInput(b.input.data(), dt, seed, rank, 0, count);
    poison(b.heap, bytes);
  }
  WEFT_ASSERT_OK(weft_allreduce(comm, send, b.heap, count, dt, nullptr));
  EXPECT_TRUE(checkAllReduce(b.heap, dt, seed, nranks, count));
}

void allToAllCase(weft_comm_t comm, Buffers& b, int rank, int nranks, weft_dtype_t dt, int64_t count, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "All-to-All " << dtypeName(dt) << " count " << count << " seed " << seed);
  const size_t bytes = count * nranks * dtypeBytes(dt);
  b.input.resize(bytes);
  fillInput(b.input.data(), dt, seed, rank, 0, count * nranks);
  poison(b.heap, bytes);
  WEFT_ASSERT_OK(weft_alltoall(comm, b.input.data(), b.heap, count, dt, nullptr));
  EXPECT_TRUE(checkAllToAll(b.heap, dt, seed, rank, nranks, count));
}

// Every dtype and count, many ops on one communicator (so signal counters carry across ops).
void matrix(int rank, int nranks, const weft_unique_id_t& id, const weft_config_t* config, uint64_t seed,
            const std::vector<int64_t>& counts) {
  weft_comm_t comm = initRank(rank, nranks, id, config);
  ASSERT_NE(comm, nullptr);
  int64_t most = 0;
  for (int64_t c : counts) most = std::max(most, c);
  Buffers b;
  WEFT_ASSERT_OK(weft_mem_alloc(comm, most * 4 * nranks, &b.heap));
  uint64_t s = seed;
  for (weft_dtype_t dt : kDtypes)
    for (int64_t count : counts) {
      allReduceCase(comm, b, rank, nranks, dt, count, ++s, false);
      allReduceCase(comm, b, rank, nranks, dt, count, ++s, true);
      allToAllCase(comm, b, rank, nranks, dt, count, ++s);
    }
  WEFT_ASSERT_OK(weft_mem_free(comm, b.heap));
  WEFT_ASSERT_OK(weft_comm_finalize(comm));
  WEFT_ASSERT_OK(weft_comm_destroy(comm));
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, EveryDtypeAndCount) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    matrix(rank, n, id, nullptr, seed, {0, 1, 7, 1237, 100003});
  };
  EXPECT_TRUE(runRanks(GetParam(), body));
}

// Tiny tiles, two inbox slots, three workers and a two-slot queue: many tiles per op, every inbox
// slot and queue slot reused many times, workers racing for items.
TEST_P(Collectives, TinyTilesStressFlowControl) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.tile_bytes = 256;
    config.persistent_ctas = 3;
    config.queue_depth = 2;
    setenv("WEFT_INBOX_SLOTS", "2", 1);
    setenv("WEFT_ONESHOT_MAX_BYTES", "0", 1);  // every size through reduce-scatter + all-gather
    matrix(rank, n, id, &config, seed, {33, 4099});
  };
  EXPECT_TRUE(runRanks(GetParam(), body));
}

// Back-to-back one-shot AllReduces of varying size: each reuses every pair's scratch, so a sender
// that overtook a slow receiver would corrupt it were the scratch areas not kept apart by epoch
// parity. Both wire formats: 8-byte lines and 128-byte lines (whose tails end mid-line).
TEST_P(Collectives, OneShotScratchIsReusedSafely) {
  const uint64_t seed = freshSeed();
  for (const char* protocol : {"ll", "ll128"}) {
    SCOPED_TRACE(protocol);
    const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
      setenv("WEFT_ONESHOT_PROTOCOL", protocol, 1);
      // Set, not auto: a job with proxy peers leaves the one-shot off unless asked for it.
      setenv("WEFT_ONESHOT_MAX_BYTES", "64K", 1);
      weft_comm_t comm = initRank(rank, n, id);
      ASSERT_NE(comm, nullptr);
      Buffers b;
      WEFT_ASSERT_OK(weft_mem_alloc(comm, 64 << 10, &b.heap));
      for (int op = 0; op < 60; ++op) {
        const weft_dtype_t dt = kDtypes[op % 3];
        const int64_t count = 1 + (op * 997) % ((64 << 10) / dtypeBytes(dt));
        allReduceCase(comm, b, rank, n, dt, count, seed + op, op % 4 == 0);
      }
      WEFT_ASSERT_OK(weft_mem_free(comm, b.heap));
      WEFT_ASSERT_OK(weft_comm_destroy(comm));
    };
    EXPECT_TRUE(runRanks(GetParam(), body));
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// 64 MiB per op: AllReduce of 16 Mi floats, All-to-All of 64 MiB in all.
class LargeCollectives : public ::testing::TestWithParam<int> {};

TEST_P(LargeCollectives, SixtyFourMiB) {
  const uint64_t seed = freshSeed();
  const int64_t count = int64_t{16} << 20;
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    Buffers b;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, count * 4, &b.heap));
    allReduceCase(comm, b, rank, n, WEFT_FLOAT32, count, seed, false);
    allToAllCase(comm, b, rank, n, WEFT_FLOAT32, count / n, seed + 1);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(GetParam(), body));
}

INSTANTIATE_TEST_SUITE_P(Ranks, LargeCollectives, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace weft::test
