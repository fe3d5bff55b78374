// AllReduce and All-to-All on every backend (tests/support/op_rank.hpp): every dtype, counts 0, 1,
// odd and multi-tile, in and out of place, many ops on one communicator (signal counters carry
// across ops), against a float64 reference on fresh random data; tiny tiles that stress the flow
// control; the one-shot AllReduce in both wire formats reusing its scratch back to back, and with
// small All-to-Alls; 64 MiB.
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "ops/collective_cases.hpp"
#include "support/multirank.hpp"

namespace weft::test {
namespace {

// Every dtype and count of `counts`, in and out of place, on one communicator.
void matrix(int rank, int n, const weft_unique_id_t& id, const weft_config_t* config, uint64_t seed,
            const std::vector<int64_t>& counts) {
  int64_t most = 0;
  for (int64_t c : counts) most = std::max(most, c);
  OpRank r = openRank(rank, n, id, most * 4 * n, config);
  ASSERT_NE(r.comm, nullptr);
  uint64_t s = seed;
  for (weft_dtype_t dt : kDtypes)
    for (int64_t count : counts) {
      allReduceCase(r, rank, n, dt, count, ++s, false);
      allReduceCase(r, rank, n, dt, count, ++s, true);
      allToAllCase(r, rank, n, dt, count, ++s);
    }
  closeRank(r);
}

class Collectives : public OnEveryBackend {};

TEST_P(Collectives, EveryDtypeAndCount) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    matrix(rank, n, id, nullptr, seed, {0, 1, 7, 1237, 100003});
  };
  EXPECT_TRUE(runRanks(ranks(), body));
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
  EXPECT_TRUE(runRanks(ranks(), body));
}

// The one-shot AllReduce in each wire format (8-byte lines, 128-byte lines): every size up to the
// limit, whose tails end mid-line, one line, many per item; then 60 back to back of varying size,
// each reusing every pair's scratch, so a sender that overtook a slow receiver would corrupt it
// were the scratch areas not kept apart by epoch parity.
TEST_P(Collectives, OneShotInEitherWireFormatReusesItsScratch) {
  const uint64_t seed = freshSeed();
  for (const char* protocol : {"ll", "ll128"}) {
    SCOPED_TRACE(protocol);
    const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
      setenv("WEFT_ONESHOT_PROTOCOL", protocol, 1);
      // Set, not auto: through the host proxy auto stops at a few KB sent in all.
      setenv("WEFT_ONESHOT_MAX_BYTES", "1M", 1);
      OpRank r = openRank(rank, n, id, 1 << 20);
      ASSERT_NE(r.comm, nullptr);
      uint64_t s = seed;
      for (weft_dtype_t dt : kDtypes)
        for (int64_t count : {1, 7, 30, 31, 61, 1237, 65539, 262139})
          if (count * dtypeBytes(dt) <= (1 << 20)) allReduceCase(r, rank, n, dt, count, ++s, count % 2 == 0);
      for (int op = 0; op < 60; ++op) {
        const weft_dtype_t dt = kDtypes[op % 3];
        const int64_t count = 1 + (op * 997) % ((64 << 10) / dtypeBytes(dt));
        allReduceCase(r, rank, n, dt, count, ++s, op % 4 == 0);
      }
      closeRank(r);
    };
    EXPECT_TRUE(runRanks(ranks(), body));
  }
}

// Small All-to-Alls among one-shot AllReduces, back to back: through the host proxy blocks up to
// the staged bound (4 KB sent in all) go staged in the one-shot exchange's scratch (one trip), which
// the AllReduces use too, so ops of either kind reuse every area by epoch parity; blocks that end
// mid-word, one word, two items' worth, and past the bound (the direct op) between them. Without
// proxy peers the All-to-All stores directly, and this is a plain mix.
TEST_P(Collectives, SmallAllToAllsShareTheOneShotScratch) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, size_t{16 << 10} * n);
    ASSERT_NE(r.comm, nullptr);
    uint64_t s = seed;
    // The staged bound through the proxy, per peer (runtime/config.cpp, autoProxyStagedBytes).
    const int64_t bound = n > 1 ? 4096 / (n - 1) / 8 * 8 : 4096;
    for (int op = 0; op < 63; ++op) {
      const weft_dtype_t dt = kDtypes[op % 3];
      const int64_t most = (16 << 10) / dtypeBytes(dt), atBound = bound / dtypeBytes(dt);
      const int64_t counts[] = {1 + (op * 131) % 7, 3, 1023, atBound, atBound + 1, atBound - 1, most};
      const int64_t count = counts[op % 7];
      allToAllCase(r, rank, n, dt, std::min(count, most), ++s);
      allReduceCase(r, rank, n, dt, 1 + (op * 997) % most, ++s, op % 3 == 0);
    }
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

WEFT_INSTANTIATE_ON_EVERY_BACKEND(Collectives);

// 64 MiB per op: AllReduce of 16 Mi floats (and of bfloat16 in place), All-to-All of 64 MiB in all.
class LargeCollectives : public OnEveryBackend {};

TEST_P(LargeCollectives, SixtyFourMiB) {
  const uint64_t seed = freshSeed();
  const int64_t count = int64_t{16} << 20;
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, count * 4);
    ASSERT_NE(r.comm, nullptr);
    allReduceCase(r, rank, n, WEFT_FLOAT32, count, seed, false);
    allReduceCase(r, rank, n, WEFT_BFLOAT16, count, seed + 1, true);
    allToAllCase(r, rank, n, WEFT_FLOAT32, count / n, seed + 2);
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

// On the CPU 2 and 4 ranks only: one rank's 64 MiB op is a local copy, which CTest's runs (one
// per proxy back-end) need not repeat.
WEFT_INSTANTIATE_ON_EVERY_BACKEND(LargeCollectives, kOnGpu ? std::vector<int>{1, 2, 4} : std::vector<int>{2, 4});

}  // namespace
}  // namespace weft::test
