// GEMM + All-to-All on every backend (tests/support/op_rank.hpp): bfloat16 and float16, random
// splits with zeros, ranks with different (and zero) token counts, odd sizes (tails of every tile
// and of the k pipeline), grouped experts with empty groups, against a float64 reference, with recv
// poisoned so that unwritten rows and rows written past the received ones show; recv_counts
// left out and a capacity of exactly what arrives; back-to-back ops on six workers.
#include "ops/gemm_cases.hpp"
#include "support/multirank.hpp"

namespace weft::test {
namespace {

class GemmAllToAll : public OnEveryBackend {};

TEST_P(GemmAllToAll, RandomSplitsOddShapesAndExperts) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, kGemmCapacity * kGemmMaxH * 2);
    ASSERT_NE(r.comm, nullptr);
    uint64_t s = seed;
    for (weft_dtype_t dt : {WEFT_BFLOAT16, WEFT_FLOAT16})
      for (const GemmShape& sh : gemmShapes())
        gemmCase(r, GemmCase{++s, n, sh.tokens, sh.k, sh.h, dt, sh.experts}, rank, kGemmCapacity);
    // recv_counts may be NULL; the capacity may be exactly what arrives.
    const GemmCase exact{++s, n, 50, 16, 32, WEFT_BFLOAT16, 1};
    gemmCase(r, exact, rank, exact.received(rank), false);
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

// Many tiles per op on six workers, back to back, each rank checking its output before the next
// op: tiles race for the per-destination counters, and a rank that runs ahead must not store into
// a peer's recv that the peer is still checking.
TEST_P(GemmAllToAll, ManyWorkersBackToBack) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.persistent_ctas = 6;
    const int64_t capacity = 4 * 400;
    OpRank r = openRank(rank, n, id, capacity * 392 * 2, &config);
    ASSERT_NE(r.comm, nullptr);
    for (int op = 0; op < 10 && !::testing::Test::HasFailure(); ++op) {
      SCOPED_TRACE(::testing::Message() << "op " << op);
      const GemmCase c{
          seed + op, n, 100 + 30 * op, 8 + 8 * (op % 3), 136 + 128 * (op % 3), op % 2 ? WEFT_FLOAT16 : WEFT_BFLOAT16,
          1 + op % 3};
      gemmCase(r, c, rank, capacity);
    }
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

WEFT_INSTANTIATE_ON_EVERY_BACKEND(GemmAllToAll);

}  // namespace
}  // namespace weft::test
