// Ranks that call the same op with different arguments (kind, dtype, counts, shape, or the heap
// block peers write into) fail that op on every rank with WEFT_ERR_INVALID_USAGE, naming both ranks
// and what differs, and nothing is written into any output. Every case runs over each
// protocol its op can take.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "support/embedding_data.hpp"
#include "support/gemm_data.hpp"
#include "support/multirank.hpp"
#include "support/oracle.hpp"

namespace weft::test {
namespace {

constexpr weft_result_t kUsage = WEFT_ERR_INVALID_USAGE;

// How an AllReduce travels: one-shot in 8-byte or 128-byte lines, or reduce-scatter + all-gather.
struct Protocol {
  const char* name;
  const char* oneShotMax;
  const char* lines;
};
void PrintTo(const Protocol& p, std::ostream* os) { *os << p.name; }
const Protocol kProtocols[] = {{"OneShotLl", "64K", "ll"}, {"OneShotLl128", "64K", "ll128"}, {"Rsag", "0", "ll"}};

class Disagree : public ::testing::TestWithParam<Protocol> {
 public:
  // A communicator with a short timeout (a case that hangs fails fast) and this protocol.
  static weft_comm_t init(int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_ONESHOT_MAX_BYTES", GetParam().oneShotMax, 1);
    setenv("WEFT_ONESHOT_PROTOCOL", GetParam().lines, 1);
    setenv("WEFT_INBOX_SLOTS", "2", 1);
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.timeout_s = 10;
    return initRank(rank, n, id, &config);
  }
};

bool allPoisoned(const void* p, size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i)
    if (b[i] != 0xff) return false;
  return true;
}

// The message names both ranks and the field.
::testing::AssertionResult failsNaming(weft_result_t r, const std::string& field) {
  auto a = failsWith(r, kUsage, field);
  if (!a) return a;
  const std::string msg = weft_get_last_error(nullptr);
  if (msg.find("rank 0") == std::string::npos || msg.find("rank 1") == std::string::npos)
    return ::testing::AssertionFailure() << "does not name both ranks: " << msg;
  return ::testing::AssertionSuccess();
}

// Every case's check, on `comm` (which it destroys): two poisoned heap blocks of `bytes`, and
// op(comm, a, b), this rank's side of an op the ranks disagree on. It must fail naming both ranks,
// `field` and each of `mentions`, leave the communicator's error INVALID_USAGE, and write neither
// block.
void expectRejected(weft_comm_t comm, size_t bytes, const std::string& field,
                    const std::function<weft_result_t(weft_comm_t, void*, void*)>& op,
                    const std::vector<std::string>& mentions = {}) {
  ASSERT_NE(comm, nullptr);
  void* a = nullptr;
  void* b = nullptr;
  WEFT_ASSERT_OK(weft_mem_alloc(comm, bytes, &a));
  WEFT_ASSERT_OK(weft_mem_alloc(comm, bytes, &b));
  poison(a, bytes);
  poison(b, bytes);
  EXPECT_TRUE(failsNaming(op(comm, a, b), field));
  const std::string msg = weft_get_last_error(nullptr);
  for (const std::string& word : mentions) EXPECT_NE(msg.find(word), std::string::npos) << msg;
  weft_result_t async = WEFT_SUCCESS;
  WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
  EXPECT_EQ(async, kUsage);
  EXPECT_TRUE(allPoisoned(a, bytes));
  EXPECT_TRUE(allPoisoned(b, bytes));
  weft_comm_destroy(comm);
}

// A communicator with a short timeout (a case that hangs fails fast).
weft_comm_t shortTimeout(int rank, int n, const weft_unique_id_t& id) {
  weft_config_t config = WEFT_CONFIG_INITIALIZER;
  config.timeout_s = 10;
  return initRank(rank, n, id, &config);
}

// One AllReduce whose two ranks disagree: rank r passes count[r] elements of dtype[r] into the
// first block (both ranks), or (ownBlocks) rank 1 into the second.
struct AllReduceMismatch {
  int64_t count[2];
  weft_dtype_t dtype[2];
  bool ownBlocks;
  const char* field;
  std::vector<std::string> mentions;
};

void runMismatch(const AllReduceMismatch& m) {
  const uint64_t seed = freshSeed();
  EXPECT_TRUE(runRanks(
      2,
      [&](int rank, int n, const weft_unique_id_t& id) {
        std::vector<float> x(std::max(m.count[0], m.count[1]));
        fillInput(x.data(), m.dtype[rank], seed, rank, 0, x.size());
        expectRejected(
            Disagree::init(rank, n, id), 4096, m.field,
            [&](weft_comm_t comm, void* a, void* b) {
              return weft_allreduce(comm, x.data(), m.ownBlocks && rank == 1 ? b : a, m.count[rank], m.dtype[rank],
                                    nullptr);
            },
            m.mentions);
      },
      60));
}

constexpr weft_dtype_t kF32 = WEFT_FLOAT32;

// Rank 0 asks for 0 elements, rank 1 for 100: rank 0 used to return at once, and its next op
// mixed in rank 1's data.
TEST_P(Disagree, AllReduceCountZeroAgainstHundred) { runMismatch({{0, 100}, {kF32, kF32}, false, "count", {}}); }

// float32 against bfloat16 of the same count: SUCCESS, with half the elements wrong, before.
TEST_P(Disagree, AllReduceDtype) {
  runMismatch({{256, 256}, {kF32, WEFT_BFLOAT16}, false, "dtype", {"float32", "bfloat16"}});
}

// Counts 100 against 200: the smaller rank succeeded and the larger timed out, one op late, before.
TEST_P(Disagree, AllReduceCounts) { runMismatch({{100, 200}, {kF32, kF32}, false, "count", {}}); }

// Each rank passes a different, locally valid output block: SUCCESS on both before, with results
// written into the block the rank did not pass.
TEST_P(Disagree, AllReduceRecvBlocks) { runMismatch({{1000, 1000}, {kF32, kF32}, true, "recv", {}}); }

// A matching op after many mismatching-looking but agreeing ones (every count, both dtypes) still
// passes: the check never fires where ranks agree, including on empty ops.
TEST_P(Disagree, AgreeingOpsOfEverySizePass) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = init(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* out = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 64 << 10, &out));
    for (uint64_t count : {0, 1, 100, 0, 0, 5000, 3, 0}) {
      for (weft_dtype_t dt : {WEFT_FLOAT32, WEFT_BFLOAT16}) {
        std::vector<float> x(count + 1);
        fillInput(x.data(), dt, seed + count, rank, 0, count);
        poison(out, 64 << 10);
        WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), out, static_cast<int64_t>(count), dt, nullptr));
        EXPECT_TRUE(checkAllReduce(out, dt, seed + count, n, count));
      }
    }
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(2, body, 120));
}

INSTANTIATE_TEST_SUITE_P(Protocols, Disagree, ::testing::ValuesIn(kProtocols),
                         [](const auto& info) { return std::string(info.param.name); });

// All-to-All with different output blocks, and with different counts; blocks of 2000 and 8000
// bytes, which through the host proxy go staged and direct.
TEST(DisagreeAllToAll, RecvBlocksAndCounts) {
  const uint64_t seed = freshSeed();
  for (const int64_t count : {500, 2000})
    for (const bool blocks : {true, false}) {
      EXPECT_TRUE(runRanks(
          2,
          [&](int rank, int n, const weft_unique_id_t& id) {
            std::vector<float> x(2 * count);
            fillInput(x.data(), WEFT_FLOAT32, seed, rank, 0, x.size());
            expectRejected(shortTimeout(rank, n, id), 2 * count * sizeof(float), blocks ? "recv" : "count",
                           [&](weft_comm_t comm, void* a, void* b) {
                             return weft_alltoall(comm, x.data(), blocks && rank == 1 ? b : a,
                                                  !blocks && rank == 1 ? 0 : count, WEFT_FLOAT32, nullptr);
                           });
          },
          60))
          << (blocks ? "recv blocks" : "counts") << ", count " << count;
    }
}

// Different ops at the same point: an AllReduce against an All-to-All.
TEST(DisagreeKinds, AllReduceAgainstAllToAll) {
  EXPECT_TRUE(runRanks(
      2,
      [&](int rank, int n, const weft_unique_id_t& id) {
        std::vector<float> x(1000, 1.f);
        expectRejected(shortTimeout(rank, n, id), 8192, "kind", [&](weft_comm_t comm, void* a, void*) {
          return rank == 0 ? weft_allreduce(comm, x.data(), a, 1000, WEFT_FLOAT32, nullptr)
                           : weft_alltoall(comm, x.data(), a, 500, WEFT_FLOAT32, nullptr);
        });
      },
      60));
}

// The fused GEMV + AllReduce with different n.
TEST(DisagreeGemv, DifferentRows) {
  const uint64_t seed = freshSeed();
  EXPECT_TRUE(runRanks(
      2,
      [&](int rank, int n, const weft_unique_id_t& id) {
        setenv("WEFT_GEMV_PATH", "fused", 1);
        const int64_t k = 64, rows = rank == 0 ? 64 : 96;
        std::vector<float> x(k), w(96 * k);
        fillInput(x.data(), WEFT_FLOAT32, seed, rank, 0, x.size());
        fillInput(w.data(), WEFT_FLOAT32, gemvWeightSeed(seed), rank, 0, w.size());
        expectRejected(shortTimeout(rank, n, id), 4096, "shape", [&](weft_comm_t comm, void* y, void*) {
          return weft_gemv_allreduce(comm, x.data(), w.data(), y, 1, rows, k, WEFT_FLOAT32, nullptr);
        });
      },
      60));
}

// The embedding op with different output blocks, and with different local batches.
TEST(DisagreeEmbedding, RecvBlocksAndBatch) {
  const uint64_t seed = freshSeed();
  for (const bool blocks : {true, false}) {
    EXPECT_TRUE(runRanks(
        2,
        [&](int rank, int n, const weft_unique_id_t& id) {
          const EmbeddingCase c{seed, n, 2, 8, WEFT_FLOAT32, 0, false};
          const EmbeddingInputs in = embeddingInputs(c, rank);
          expectRejected(shortTimeout(rank, n, id), 4096, blocks ? "recv" : "local_batch",
                         [&](weft_comm_t comm, void* a, void* b) {
                           return weft_embedding_alltoall(comm, in.weights.data(), in.tableOffsets.data(),
                                                          c.tables(rank), in.indices.data(), in.offsets.data(), nullptr,
                                                          WEFT_POOL_SUM, blocks && rank == 1 ? b : a,
                                                          !blocks && rank == 1 ? 1 : 2, c.totalTables(),
                                                          c.tableBase(rank), 8, WEFT_FLOAT32, nullptr);
                         });
        },
        60))
        << (blocks ? "recv blocks" : "local batch");
  }
}

// A rank's side of a GEMM + All-to-All of up to 60 tokens a rank (k 8, h 16, two experts, bf16,
// capacity 200 rows).
struct GemmSide {
  static constexpr int64_t kCapacity = 200;
  static constexpr size_t kRecvBytes = kCapacity * 16 * 2;
  GemmCase c;
  GemmInputs in;
  GemmSide(uint64_t seed, int rank, int n) : c{seed, n, 60, 8, 16, WEFT_BFLOAT16, 2}, in(gemmInputs(c, rank)) {}
  weft_result_t run(weft_comm_t comm, int rank, void* recv) const {
    return weft_grouped_gemm_alltoall(comm, in.a.data(), in.w.data(), 2, in.expertOffsets.data(), in.sendCounts.data(),
                                      recv, kCapacity, nullptr, c.tokens(rank), 8, 16, WEFT_BFLOAT16, nullptr);
  }
};

// The GEMM + All-to-All with different output blocks: its route carries the signature, and the
// disagreement comes before the offsets' own check (which names rank 0's block).
TEST(DisagreeGemm, RecvBlocks) {
  const uint64_t seed = freshSeed();
  EXPECT_TRUE(runRanks(
      2,
      [&](int rank, int n, const weft_unique_id_t& id) {
        const GemmSide g(seed, rank, n);
        expectRejected(shortTimeout(rank, n, id), GemmSide::kRecvBytes, "recv",
                       [&](weft_comm_t comm, void* a, void* b) { return g.run(comm, rank, rank == 0 ? a : b); });
      },
      60));
}

// A GEMM + All-to-All against an AllReduce: the GEMM's route has no signal to carry its word, so
// it publishes the word after the route; without it, the AllReduce rank waited for its timeout.
TEST(DisagreeKinds, GemmAgainstAllReduce) {
  const uint64_t seed = freshSeed();
  EXPECT_TRUE(runRanks(
      2,
      [&](int rank, int n, const weft_unique_id_t& id) {
        const GemmSide g(seed, rank, n);
        std::vector<float> x(1000, 1.f);
        expectRejected(shortTimeout(rank, n, id), GemmSide::kRecvBytes, "kind", [&](weft_comm_t comm, void* a, void*) {
          return rank == 1 ? weft_allreduce(comm, x.data(), a, 1000, WEFT_FLOAT32, nullptr) : g.run(comm, rank, a);
        });
      },
      60));
}

// With the check off, ranks that agree still run every op (the empty ones still meet), and the
// descriptors carry no signature.
TEST(DisagreeSetting, OffStillRunsAgreeingOps) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_CHECK_SIGNATURES", "0", 1);
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* out = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 64 << 10, &out));
    for (uint64_t count : {0, 100, 0, 0, 3000}) {
      std::vector<float> x(count + 1);
      fillInput(x.data(), WEFT_FLOAT32, seed + count, rank, 0, count);
      poison(out, 64 << 10);
      WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), out, static_cast<int64_t>(count), WEFT_FLOAT32, nullptr));
      EXPECT_TRUE(checkAllReduce(out, WEFT_FLOAT32, seed + count, n, count));
      WEFT_ASSERT_OK(weft_alltoall(comm, x.data(), out, static_cast<int64_t>(count / 2), WEFT_FLOAT32, nullptr));
      EXPECT_TRUE(checkAllToAll(out, WEFT_FLOAT32, seed + count, rank, n, count / 2));
    }
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(2, body, 120));
}

// The setting must be the same on every rank (a rank that checks would wait for words a rank
// that does not check never sends).
TEST(DisagreeSetting, CheckSignaturesMustAgree) {
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_CHECK_SIGNATURES", rank == 0 ? "1" : "0", 1);
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(
        failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_USAGE, "check_signatures"));
    EXPECT_EQ(comm, nullptr);
  };
  EXPECT_TRUE(runRanks(2, body));
}

}  // namespace
}  // namespace weft::test
