// Embedding-bag + All-to-All on every backend (tests/support/op_rank.hpp), with a different number
// of tables per rank: every dtype, sum and mean, with and without per-sample weights, dims 4 to
// 1024 (12: a GPU lane group with lanes that hold no chunk of the row), empty bags and an op with
// no samples, against a float64 reference; back-to-back ops on six workers, on each path and with
// the ranks on different paths (embedding_path).
#include "ops/embedding_cases.hpp"
#include "support/multirank.hpp"

namespace weft::test {
namespace {

class Embedding : public OnEveryBackend {};

TEST_P(Embedding, EveryDtypeModeAndDim) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, 7 * 7 * 1024 * 4);  // 7 samples of 7 tables at most
    ASSERT_NE(r.comm, nullptr);
    uint64_t s = seed;
    for (weft_dtype_t dt : kDtypes)
      for (int64_t dim : {4, 12, 128, 1024})
        for (int mode : {0, 1})
          for (bool weighted : {false, true})
            embeddingCase(r, EmbeddingCase{++s, n, 1 + static_cast<int64_t>(s % 7), dim, dt, mode, weighted}, rank);
    // An op with no samples is still collective.
    embeddingCase(r, EmbeddingCase{++s, n, 0, 8, WEFT_FLOAT32, 0, false}, rank);
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

// Six workers and batches large enough for many items per op, and back-to-back ops whose outputs
// each rank checks before its next op: items race for the done counter, and a rank that runs ahead
// must not store into a peer's output that the peer is still checking (the ready epoch). The
// unfused path's pooling op shares the engine's buffer between the ops, and its ops meet fused ones.
TEST_P(Embedding, ManyWorkersBackToBack) {
  for (const std::string path : {"fused", "unfused", "mixed"}) {
    SCOPED_TRACE(path);
    const uint64_t seed = freshSeed();
    const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
      setenv("WEFT_EMBEDDING_PATH", path == "mixed" ? (rank % 2 ? "fused" : "unfused") : path.c_str(), 1);
      weft_config_t config = WEFT_CONFIG_INITIALIZER;
      config.persistent_ctas = 6;
      OpRank r = openRank(rank, n, id, 64 * 12 * 32 * 4, &config);
      ASSERT_NE(r.comm, nullptr);
      for (int op = 0; op < 24 && !::testing::Test::HasFailure(); ++op) {
        SCOPED_TRACE(::testing::Message() << "op " << op);
        embeddingCase(
            r, EmbeddingCase{seed + op, n, 17 + (op * 7) % 48, 8 + 8 * (op % 4), kDtypes[op % 3], op % 2, op % 3 == 0},
            rank);
      }
      closeRank(r);
    };
    EXPECT_TRUE(runRanks(ranks(), body)) << path;
  }
}

WEFT_INSTANTIATE_ON_EVERY_BACKEND(Embedding);

}  // namespace
}  // namespace weft::test
