// Embedding-bag + All-to-All's faults and arguments on the CPU backend (its cases on every backend
// are tests/ops/test_embedding.cpp): an out-of-range index fails the op on every rank, naming it,
// and unchecked indices still pool correctly; every bad argument is named.
#include <vector>

#include "ops/embedding_cases.hpp"
#include "support/multirank.hpp"

namespace weft::test {
namespace {

TEST(EmbeddingFaults, AnIndexOutOfRangeFailsTheOpOnEveryRankAndNamesIt) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, 1 << 16);
    ASSERT_NE(r.comm, nullptr);
    const EmbeddingCase c{seed, n, 3, 8, WEFT_FLOAT32, 0, false};
    // A good op first; then rank 1 sends one index past its first table's end.
    embeddingCase(r, c, rank);
    EmbeddingInputs in = embeddingInputs(c, rank);
    if (rank == 1) {  // into bag (table 0, sample 0), bound for rank 0
      in.indices.insert(in.indices.begin(), in.tableOffsets[1] - in.tableOffsets[0] + 5);
      for (size_t b = 1; b < in.offsets.size(); ++b) ++in.offsets[b];
    }
    const weft_result_t result = runEmbedding(r, c, rank, EmbeddingOnBackend(in));
    EXPECT_TRUE(failsWith(result, WEFT_ERR_INVALID_ARGUMENT, rank == 1 ? "is not a row of table 0" : "rank 1 found"));
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(r.comm, &async));
    EXPECT_EQ(async, WEFT_ERR_INVALID_ARGUMENT);
    closeFailedRank(r);
  };
  EXPECT_TRUE(runRanks(3, body));
}

TEST(EmbeddingFaults, UncheckedIndicesStillPoolCorrectly) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_CHECK_INDICES", "0", 1);
    OpRank r = openRank(rank, n, id, 1 << 16);
    ASSERT_NE(r.comm, nullptr);
    embeddingCase(r, EmbeddingCase{seed, n, 4, 16, WEFT_BFLOAT16, 1, true}, rank);
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(2, body));
}

TEST(EmbeddingBadInput, EveryArgumentIsNamedAndNothingIsLost) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, 4096);
    ASSERT_NE(r.comm, nullptr);
    const weft_comm_t comm = r.comm;
    void* recv = r.heap;
    const EmbeddingCase c{seed, n, 2, 8, WEFT_FLOAT32, 0, false};
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
    embeddingCase(r, c, rank);
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(2, body));
}

}  // namespace
}  // namespace weft::test
