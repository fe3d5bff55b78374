// Embedding-bag + All-to-All on 1-4 ranks (separate processes) with a different number of tables
// per rank: every dtype, sum and mean, with and without per-sample weights, dims 4 to 1024, empty
// bags, against a float64 reference; back-to-back ops on six workers; an out-of-range index fails
// the op on every rank, naming it; every bad argument is named.
#include <vector>

#include "support/embedding_data.hpp"
#include "support/multirank.hpp"
#include "support/oracle.hpp"

namespace weft::test {
namespace {

weft_result_t runCase(weft_comm_t comm, const EmbeddingCase& c, int rank, const EmbeddingInputs& in, void* recv) {
  return weft_embedding_alltoall(comm, in.weights.data(), in.tableOffsets.data(), c.tables(rank), in.indices.data(),
                                 in.offsets.data(), c.sampleWeights ? in.sampleWeights.data() : nullptr,
                                 static_cast<weft_pool_mode_t>(c.mode), recv, c.localBatch, c.totalTables(),
                                 c.tableBase(rank), c.dim, c.dtype, nullptr);
}

class Embedding : public ::testing::TestWithParam<int> {};

TEST_P(Embedding, EveryDtypeModeAndDim) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* recv = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 5 * 12 * 1024 * 4, &recv));
    uint64_t s = seed;
    for (weft_dtype_t dt : {WEFT_FLOAT32, WEFT_FLOAT16, WEFT_BFLOAT16})
      for (int64_t dim : {4, 12, 128})
        for (int mode : {0, 1})
          for (bool weighted : {false, true}) {
            EmbeddingCase c{++s, n, 1 + static_cast<int64_t>(s % 5), dim, dt, mode, weighted};
            SCOPED_TRACE(::testing::Message() << dtypeName(dt) << " dim " << dim << " mode " << mode
                                              << (weighted ? " weighted" : "") << " seed " << c.seed);
            const EmbeddingInputs in = embeddingInputs(c, rank);
            const size_t bytes = c.localBatch * c.totalTables() * c.dim * dtypeBytes(dt);
            poison(recv, bytes);
            WEFT_ASSERT_OK(runCase(comm, c, rank, in, recv));
            EXPECT_TRUE(checkEmbedding(recv, c, rank));
          }
    // The widest rows, and an op with no samples (still collective).
    EmbeddingCase wide{++s, n, 2, 1024, WEFT_BFLOAT16, 0, false};
    const EmbeddingInputs in = embeddingInputs(wide, rank);
    WEFT_ASSERT_OK(runCase(comm, wide, rank, in, recv));
    EXPECT_TRUE(checkEmbedding(recv, wide, rank));
    EmbeddingCase none{++s, n, 0, 8, WEFT_FLOAT32, 0, false};
    const EmbeddingInputs noBags = embeddingInputs(none, rank);
    WEFT_ASSERT_OK(runCase(comm, none, rank, noBags, recv));
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(GetParam(), body));
}

// Six workers and batches large enough for many items per op, and back-to-back ops whose outputs
// each rank checks before its next op: items race for the done counter, and a rank that runs ahead
// must not store into a peer's output that the peer is still checking (the ready epoch).
TEST_P(Embedding, ManyWorkersBackToBack) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.persistent_ctas = 6;
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* recv = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 64 * 12 * 32 * 4, &recv));
    for (int op = 0; op < 24; ++op) {
      EmbeddingCase c{seed + op, n, 17 + (op * 7) % 48, 8 + 8 * (op % 4), kDtypes[op % 3], op % 2, op % 3 == 0};
      SCOPED_TRACE(::testing::Message() << "op " << op << " seed " << c.seed);
      const EmbeddingInputs in = embeddingInputs(c, rank);
      poison(recv, c.localBatch * c.totalTables() * c.dim * dtypeBytes(c.dtype));
      WEFT_ASSERT_OK(runCase(comm, c, rank, in, recv));
      ASSERT_TRUE(checkEmbedding(recv, c, rank));
    }
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(GetParam(), body));
}

INSTANTIATE_TEST_SUITE_P(Ranks, Embedding, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(EmbeddingFaults, AnIndexOutOfRangeFailsTheOpOnEveryRankAndNamesIt) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* recv = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 16, &recv));
    EmbeddingCase c{seed, n, 3, 8, WEFT_FLOAT32, 0, false};
    EmbeddingInputs in = embeddingInputs(c, rank);
    // A good op first; then rank 1 sends one index past its first table's end.
    WEFT_ASSERT_OK(runCase(comm, c, rank, in, recv));
    if (rank == 1) {  // into bag (table 0, sample 0), bound for rank 0
      in.indices.insert(in.indices.begin(), in.tableOffsets[1] - in.tableOffsets[0] + 5);
      for (size_t b = 1; b < in.offsets.size(); ++b) ++in.offsets[b];
    }
    const weft_result_t r = runCase(comm, c, rank, in, recv);
    EXPECT_TRUE(failsWith(r, WEFT_ERR_INVALID_ARGUMENT, rank == 1 ? "is not a row of table 0" : "rank 1 found"));
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    EXPECT_EQ(async, WEFT_ERR_INVALID_ARGUMENT);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(3, body));
}

TEST(EmbeddingFaults, UncheckedIndicesStillPoolCorrectly) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    setenv("WEFT_CHECK_INDICES", "0", 1);
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* recv = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 16, &recv));
    EmbeddingCase c{seed, n, 4, 16, WEFT_BFLOAT16, 1, true};
    const EmbeddingInputs in = embeddingInputs(c, rank);
    WEFT_ASSERT_OK(runCase(comm, c, rank, in, recv));
    EXPECT_TRUE(checkEmbedding(recv, c, rank));
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(2, body));
}

TEST(EmbeddingBadInput, EveryArgumentIsNamedAndNothingIsLost) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* recv = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 4096, &recv));
    EmbeddingCase c{seed, n, 2, 8, WEFT_FLOAT32, 0, false};
    const EmbeddingInputs in = embeddingInputs(c, rank);
    const weft_result_t bad = WEFT_ERR_INVALID_ARGUMENT;
    auto call = [&](const void* w, const int64_t* to, int64_t tables, int mode, void* out, int64_t batch, int64_t total,
                    int64_t base, int64_t dim) {
      return weft_embedding_alltoall(comm, w, to, tables, in.indices.data(), in.offsets.data(), nullptr,
                                     static_cast<weft_pool_mode_t>(mode), out, batch, total, base, dim, WEFT_FLOAT32,
                                     nullptr);
    };
    const void* w = in.weights.data();
    const int64_t* to = in.tableOffsets.data();
    const int64_t t = c.tables(rank), T = c.totalTables(), B = c.tableBase(rank);
    EXPECT_TRUE(failsWith(call(w, to, t, 0, recv, 2, T, B, 0), bad, "dim: 0"));
    EXPECT_TRUE(failsWith(call(w, to, t, 0, recv, 2, T, B, 6), bad, "dim: 6"));
    EXPECT_TRUE(failsWith(call(w, to, t, 0, recv, 2, T, B, 2048), bad, "dim: 2048"));
    EXPECT_TRUE(failsWith(call(w, to, t, 2, recv, 2, T, B, 8), bad, "mode: 2"));
    EXPECT_TRUE(failsWith(call(w, to, t, 0, recv, -1, T, B, 8), bad, "local_batch"));
    EXPECT_TRUE(failsWith(call(w, to, -1, 0, recv, 2, T, B, 8), bad, "num_tables"));
    EXPECT_TRUE(failsWith(call(w, to, t, 0, recv, 2, T, T, 8), bad, "table_base"));
    EXPECT_TRUE(failsWith(call(nullptr, to, t, 0, recv, 2, T, B, 8), bad, "weights"));
    EXPECT_TRUE(failsWith(call(w, nullptr, t, 0, recv, 2, T, B, 8), bad, "table_offsets"));
    EXPECT_TRUE(failsWith(call(w, to, t, 0, nullptr, 2, T, B, 8), bad, "recv: NULL"));
    std::vector<uint8_t> notHeap(4096);
    EXPECT_TRUE(failsWith(call(w, to, t, 0, notHeap.data(), 2, T, B, 8), bad, "recv: must be a buffer"));
    EXPECT_TRUE(failsWith(call(w, to, t, 0, recv, 64, T, B, 8), bad, "recv:"));
    // Nothing ran, nothing is owed: the next op pairs up on every rank.
    WEFT_ASSERT_OK(runCase(comm, c, rank, in, recv));
    EXPECT_TRUE(checkEmbedding(recv, c, rank));
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(2, body));
}

}  // namespace
}  // namespace weft::test
