// Embedding-bag + All-to-All's paths, faults and arguments on the CPU backend (its cases on every
// backend are tests/ops/test_embedding.cpp): the unfused path gives the fused path's results, also
// where ranks take different paths, and weftctl shows its pooling ops; an out-of-range index fails
// the op on every rank, naming it, on either path; unchecked indices still pool correctly; every
// bad argument is named.
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ops/embedding_cases.hpp"
#include "support/multirank.hpp"
#include "support/queue_json.hpp"

namespace weft::test {
namespace {

// One index past table 0's end, into bag (table 0, sample 0).
void withBadIndex(EmbeddingInputs& in) {
  in.indices.insert(in.indices.begin(), in.tableOffsets[1] - in.tableOffsets[0] + 5);
  for (size_t b = 1; b < in.offsets.size(); ++b) ++in.offsets[b];
}

// embedding_path unfused: every bag pooled into the engine's buffer on the calling thread, then
// sent by the op's exchange. Every mode, weighting and dim of the suite in every dtype on 1-4
// ranks, first with the odd ranks fused (the paths meet in one op), then every rank unfused; the
// status page marks each op with the path it took (a job per dtype, so that its page's history
// holds every op).
class EmbeddingUnfusedPath : public ::testing::TestWithParam<int> {};

TEST_P(EmbeddingUnfusedPath, MatchesTheReferenceAndRanksMayDiffer) {
  uint64_t s = freshSeed();
  for (const bool mixed : {true, false})
    for (weft_dtype_t dt : kDtypes) {
      const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
        const bool unfused = !mixed || rank % 2 == 0;
        setenv("WEFT_EMBEDDING_PATH", unfused ? "unfused" : "fused", 1);
        OpRank r = openRank(rank, n, id, 7 * 7 * 1024 * 4);
        ASSERT_NE(r.comm, nullptr);
        uint64_t seed = s;
        size_t ops = 0;
        for (int64_t dim : {4, 12, 128})
          for (int mode : {0, 1})
            for (bool weighted : {false, true}) {
              embeddingCase(r, EmbeddingCase{++seed, n, 1 + static_cast<int64_t>(seed % 7), dim, dt, mode, weighted},
                            rank);
              ++ops;
            }
        // Nothing to pool: fused, whatever the setting.
        embeddingCase(r, EmbeddingCase{++seed, n, 0, 8, dt, 0, false}, rank);
        const std::string json = queueJson();
        EXPECT_EQ(occurrences(json, "\"op\":\"embedding_alltoall\""), ops + 1) << json;
        EXPECT_EQ(occurrences(json, "\"path\":\"unfused\""), unfused ? ops : 0) << json;
        EXPECT_EQ(occurrences(json, "\"path\":\"fused\""), unfused ? 1 : ops + 1) << json;
        closeRank(r);
      };
      EXPECT_TRUE(runRanks(GetParam(), body))
          << (mixed ? "odd ranks fused, " : "every rank unfused, ") << dtypeName(dt);
      s += 100;
    }
}

INSTANTIATE_TEST_SUITE_P(Ranks, EmbeddingUnfusedPath, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& i) { return std::to_string(i.param) + "ranks"; });

// On either path (unfused: the pooling notes the index, the exchange after it carries it).
class EmbeddingFaults : public ::testing::TestWithParam<const char*> {};

TEST_P(EmbeddingFaults, AnIndexOutOfRangeFailsTheOpOnEveryRankAndNamesIt) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_EMBEDDING_PATH", GetParam(), 1);
    OpRank r = openRank(rank, n, id, 1 << 16);
    ASSERT_NE(r.comm, nullptr);
    const EmbeddingCase c{seed, n, 3, 8, WEFT_FLOAT32, 0, false};
    // A good op first; then rank 1 sends one index past its first table's end.
    embeddingCase(r, c, rank);
    EmbeddingInputs in = embeddingInputs(c, rank);
    if (rank == 1) withBadIndex(in);  // bound for rank 0
    const weft_result_t result = runEmbedding(r, c, rank, EmbeddingOnBackend(in));
    EXPECT_TRUE(failsWith(result, WEFT_ERR_INVALID_ARGUMENT, rank == 1 ? "is not a row of table 0" : "rank 1 found"));
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(r.comm, &async));
    EXPECT_EQ(async, WEFT_ERR_INVALID_ARGUMENT);
    closeFailedRank(r);
  };
  EXPECT_TRUE(runRanks(3, body));
}

INSTANTIATE_TEST_SUITE_P(Paths, EmbeddingFaults, ::testing::Values("fused", "unfused"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

// Two threads of rank 0 on one communicator: op A's exchange is in flight (it waits for rank 1,
// which issues its ops late) when thread B's unfused op, with a bad index, pools. B's pooling must
// name B's exchange, not A's: A succeeds on every rank, B fails on every rank. (When the pooling
// read the engine's counters while A was in flight, the index failed A.)
TEST(EmbeddingFaults, ABadIndexFailsItsOwnOpWhileAnotherThreadsOpIsInFlight) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_EMBEDDING_PATH", "unfused", 1);
    OpRank r = openRank(rank, n, id, 1 << 16);
    ASSERT_NE(r.comm, nullptr);
    const EmbeddingCase c{seed, n, 3, 8, WEFT_FLOAT32, 0, false};
    EmbeddingInputs bad = embeddingInputs(c, rank);
    if (rank == 0) withBadIndex(bad);
    const EmbeddingOnBackend good(embeddingInputs(c, rank)), badOnBackend(bad);
    void* secondRecv = static_cast<uint8_t*>(r.heap) + (1 << 15);
    auto runB = [&] {
      return weft_embedding_alltoall(r.comm, badOnBackend.weights, badOnBackend.tableOffsets, c.tables(rank),
                                     badOnBackend.indices, badOnBackend.offsets, nullptr, WEFT_POOL_SUM, secondRecv,
                                     c.localBatch, c.totalTables(), c.tableBase(rank), c.dim, c.dtype, r.stream);
    };
    weft_result_t a = WEFT_SUCCESS, b = WEFT_SUCCESS;
    std::string whyB;  // the last error is the calling thread's
    if (rank == 0) {
      std::thread second([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // A's exchange is in flight by now
        b = runB();
        whyB = weft_get_last_error(nullptr);
      });
      a = runEmbedding(r, c, rank, good);
      second.join();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));  // rank 0's B pools meanwhile
      a = runEmbedding(r, c, rank, good);
      b = runB();
      whyB = weft_get_last_error(nullptr);
    }
    EXPECT_EQ(a, WEFT_SUCCESS) << weft_get_error_string(a);
    EXPECT_TRUE(receivedEmbedding(r, c, rank));
    EXPECT_EQ(b, WEFT_ERR_INVALID_ARGUMENT);
    EXPECT_NE(whyB.find(rank == 0 ? "is not a row of table 0" : "rank 0 found"), std::string::npos) << whyB;
    closeFailedRank(r);
  };
  EXPECT_TRUE(runRanks(2, body));
}

TEST(EmbeddingUncheckedIndices, StillPoolCorrectly) {
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
