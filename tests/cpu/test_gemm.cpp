// GEMM + All-to-All on 1-4 ranks (separate processes): bfloat16 and float16, random splits with
// zeros, ranks with different (and zero) token counts, odd sizes (tails of every tile), grouped
// experts with empty groups, against a float64 reference, with recv poisoned so unwritten rows
// and rows written past the received ones show; back-to-back ops on six workers; a capacity too
// small and unsound send counts fail the op on every rank, naming the rank, with nothing stored;
// every bad argument is named. The blas path (the vendor BLAS's GEMM, then the op routes its rows)
// gives the same results, also where ranks take different paths, and weftctl shows it was taken.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/gemm_data.hpp"
#include "support/multirank.hpp"
#include "support/oracle.hpp"

namespace weft::test {
namespace {

weft_result_t runGemm(weft_comm_t comm, const GemmCase& c, int rank, const GemmInputs& in, void* recv, int64_t capacity,
                      int64_t* recvCounts) {
  return weft_grouped_gemm_alltoall(comm, in.a.data(), in.w.data(), c.experts,
                                    c.experts > 1 ? in.expertOffsets.data() : nullptr, in.sendCounts.data(), recv,
                                    capacity, recvCounts, c.tokens(rank), c.k, c.h, c.dtype, nullptr);
}

// Runs case `c` and checks what `rank` received.
void gemmCase(weft_comm_t comm, const GemmCase& c, int rank, void* recv, int64_t capacity) {
  SCOPED_TRACE(::testing::Message() << dtypeName(c.dtype) << " max tokens " << c.maxTokens << " k " << c.k << " h "
                                    << c.h << " experts " << c.experts << " seed " << c.seed);
  const GemmInputs in = gemmInputs(c, rank);
  std::vector<int64_t> counts(c.nranks, -7);
  poison(recv, capacity * c.h * dtypeBytes(c.dtype));
  WEFT_ASSERT_OK(runGemm(comm, c, rank, in, recv, capacity, counts.data()));
  EXPECT_TRUE(checkGemm(recv, counts.data(), c, rank, capacity));
}

struct Shape {
  int64_t tokens, k, h, experts;
};
constexpr Shape kShapes[] = {{300, 40, 264, 1}, {37, 8, 8, 1}, {1, 16, 136, 3}, {260, 136, 128, 4},
                             {5, 0, 16, 1},     {0, 8, 24, 1}, {9, 24, 0, 2}};

class GemmAllToAll : public ::testing::TestWithParam<int> {};

TEST_P(GemmAllToAll, RandomSplitsOddShapesAndExperts) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    const int64_t capacity = 4 * 300;
    void* recv = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, capacity * 264 * 2, &recv));
    uint64_t s = seed;
    for (weft_dtype_t dt : {WEFT_BFLOAT16, WEFT_FLOAT16})
      for (const Shape& sh : kShapes)
        gemmCase(comm, GemmCase{++s, n, sh.tokens, sh.k, sh.h, dt, sh.experts}, rank, recv, capacity);
    // recv_counts may be NULL; the capacity may be exactly what arrives.
    const GemmCase exact{++s, n, 50, 16, 32, WEFT_BFLOAT16, 1};
    const GemmInputs in = gemmInputs(exact, rank);
    poison(recv, exact.received(rank) * exact.h * 2);
    WEFT_ASSERT_OK(runGemm(comm, exact, rank, in, recv, exact.received(rank), nullptr));
    EXPECT_TRUE(checkGemm(recv, nullptr, exact, rank, exact.received(rank)));
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(GetParam(), body));
}

// Many tiles per op on six workers, back to back, each rank checking its output before the next
// op: tiles race for the per-destination counters, and a rank that runs ahead must not store into
// a peer's recv that the peer is still checking.
TEST_P(GemmAllToAll, ManyWorkersBackToBack) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.persistent_ctas = 6;
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    const int64_t capacity = 4 * 400;
    void* recv = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, capacity * 392 * 2, &recv));
    for (int op = 0; op < 10; ++op) {
      const GemmCase c{
          seed + op, n, 100 + 30 * op, 8 + 8 * (op % 3), 136 + 128 * (op % 3), op % 2 ? WEFT_FLOAT16 : WEFT_BFLOAT16,
          1 + op % 3};
      SCOPED_TRACE(::testing::Message() << "op " << op);
      gemmCase(comm, c, rank, recv, capacity);
    }
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(GetParam(), body));
}

// `weftctl queue --json` for this process's communicators.
std::string queueJson() {
  const std::string cmd = std::string(WEFT_TEST_WEFTCTL) + " queue --json --pid " + std::to_string(getpid()) + " 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    pclose(p);
  }
  return out;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// gemm_path blas: the vendor BLAS's GEMM (on the CPU backend the engine's stand-in, on the calling
// thread), then the op routes the product's rows. Every shape of the suite against the same
// reference, first with the odd ranks fused (the paths meet in one op), then every rank blas.
// Grouped calls and empty ones run fused whatever the setting; the status page says which ran.
TEST_P(GemmAllToAll, TheBlasPathRoutesTheProductAndRanksMayDiffer) {
  const uint64_t seed = freshSeed();
  for (const bool mixed : {true, false}) {
    const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
      const bool blas = !mixed || rank % 2 == 0;
      setenv("WEFT_GEMM_PATH", blas ? "blas" : "fused", 1);
      weft_comm_t comm = initRank(rank, n, id);
      ASSERT_NE(comm, nullptr);
      const int64_t capacity = 4 * 300;
      void* recv = nullptr;
      WEFT_ASSERT_OK(weft_mem_alloc(comm, capacity * 264 * 2, &recv));
      uint64_t s = seed + (mixed ? 0 : 100);
      int vendorOps = 0;  // the cases the blas path takes: one expert, nothing empty
      for (weft_dtype_t dt : {WEFT_BFLOAT16, WEFT_FLOAT16})
        for (const Shape& sh : kShapes) {
          const GemmCase c{++s, n, sh.tokens, sh.k, sh.h, dt, sh.experts};
          gemmCase(comm, c, rank, recv, capacity);
          vendorOps += blas && sh.experts == 1 && c.tokens(rank) > 0 && sh.k > 0 && sh.h > 0;
        }
      const std::string json = queueJson();
      EXPECT_EQ(occurrences(json, "\"path\":\"blas\""), static_cast<size_t>(vendorOps)) << json;
      EXPECT_EQ(occurrences(json, "\"op\":\"gemm_alltoall\""), 2 * std::size(kShapes)) << json;
      WEFT_ASSERT_OK(weft_comm_destroy(comm));
    };
    EXPECT_TRUE(runRanks(GetParam(), body)) << (mixed ? "odd ranks fused" : "every rank blas");
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GemmAllToAll, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// Rank 1's capacity is one row short: the op fails on every rank with the same message, and no
// rank's recv or recv_counts is written.
TEST(GemmFaults, ACapacityTooSmallFailsEveryRankAndStoresNothing) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* recv = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &recv));
    GemmCase c{seed, n, 64, 16, 24, WEFT_BFLOAT16, 1};
    while (c.received(1) == 0) ++c.seed;
    const GemmInputs in = gemmInputs(c, rank);
    const int64_t capacity = rank == 1 ? c.received(1) - 1 : c.received(rank);
    std::vector<int64_t> counts(n, -7);
    poison(recv, 1 << 20);
    const weft_result_t r = runGemm(comm, c, rank, in, recv, capacity, counts.data());
    EXPECT_TRUE(
        failsWith(r, WEFT_ERR_INVALID_ARGUMENT,
                  "rank 1 would receive " + std::to_string(c.received(1)) + " rows, more than its recv_capacity"));
    for (int i = 0; i < n; ++i) EXPECT_EQ(counts[i], -7);
    for (int i = 0; i < (1 << 20); ++i)
      if (static_cast<uint8_t*>(recv)[i] != 0xff) {
        ADD_FAILURE() << "byte " << i << " of recv was written";
        break;
      }
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(3, body));
}

TEST(GemmFaults, SendCountsThatDoNotSumToTokensFailEveryRank) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* recv = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 18, &recv));
    const GemmCase c{seed, n, 40, 8, 16, WEFT_FLOAT16, 2};
    GemmInputs in = gemmInputs(c, rank);
    if (rank == 2) in.sendCounts[0] += 1;
    const weft_result_t r = runGemm(comm, c, rank, in, recv, 1 << 12, nullptr);
    EXPECT_TRUE(failsWith(r, WEFT_ERR_INVALID_ARGUMENT, "rank 2's send_counts are negative or do not sum"));
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(3, body));
}

// Rank 1 passes a recv at another heap offset than rank 0's: its peers would store into the
// wrong place, so the op fails on every rank before anything is stored. The ranks' signatures
// differ (INVALID_USAGE, as any ranks that disagree); with check_signatures off, the route's own
// comparison of the offsets still fails it (INVALID_ARGUMENT, naming rank 0's block).
TEST(GemmFaults, ADifferentRecvOnOneRankFailsEveryRank) {
  const uint64_t seed = freshSeed();
  for (const bool check : {true, false}) {
    const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
      setenv("WEFT_CHECK_SIGNATURES", check ? "1" : "0", 1);
      weft_comm_t comm = initRank(rank, n, id);
      ASSERT_NE(comm, nullptr);
      void* recv = nullptr;
      WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 18, &recv));
      const GemmCase c{seed, n, 40, 8, 16, WEFT_BFLOAT16, 1};
      const GemmInputs in = gemmInputs(c, rank);
      void* mine = static_cast<uint8_t*>(recv) + (rank == 1 ? 4096 : 0);
      const weft_result_t r = runGemm(comm, c, rank, in, mine, 1 << 12, nullptr);
      if (check)
        EXPECT_TRUE(failsWith(r, WEFT_ERR_INVALID_USAGE, "differ in the heap offset of recv"));
      else
        EXPECT_TRUE(failsWith(r, WEFT_ERR_INVALID_ARGUMENT, "rank 1's recv is not the buffer rank 0 passed"));
      WEFT_ASSERT_OK(weft_comm_destroy(comm));
    };
    EXPECT_TRUE(runRanks(3, body)) << "check_signatures " << check;
  }
}

TEST(GemmBadInput, EveryArgumentIsNamedAndNothingIsLost) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* recv = nullptr;
    const int64_t capacity = 200;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, capacity * 16 * 2, &recv));
    const GemmCase c{seed, n, 60, 8, 16, WEFT_BFLOAT16, 2};
    const GemmInputs in = gemmInputs(c, rank);
    const weft_result_t bad = WEFT_ERR_INVALID_ARGUMENT;
    const int64_t t = c.tokens(rank);
    auto call = [&](const void* a, const void* w, int64_t experts, const int64_t* offs, const int64_t* sc, void* out,
                    int64_t cap, int64_t tokens, int64_t k, int64_t h, weft_dtype_t dt) {
      return weft_grouped_gemm_alltoall(comm, a, w, experts, offs, sc, out, cap, nullptr, tokens, k, h, dt, nullptr);
    };
    const void* a = in.a.data();
    const void* w = in.w.data();
    const int64_t* o = in.expertOffsets.data();
    const int64_t* sc = in.sendCounts.data();
    const weft_dtype_t bf = WEFT_BFLOAT16;
    EXPECT_TRUE(failsWith(call(a, w, 2, o, sc, recv, capacity, t, 8, 16, WEFT_FLOAT32), bad, "dtype: the GEMM"));
    EXPECT_TRUE(failsWith(call(a, w, 2, o, sc, recv, capacity, t, 6, 16, bf), bad, "k: 6 is not a multiple of 8"));
    EXPECT_TRUE(failsWith(call(a, w, 2, o, sc, recv, capacity, t, 8, 12, bf), bad, "h: 12 is not a multiple of 8"));
    EXPECT_TRUE(failsWith(call(a, w, 2, o, sc, recv, capacity, -1, 8, 16, bf), bad, "tokens"));
    EXPECT_TRUE(failsWith(call(a, w, 2, o, sc, recv, -1, t, 8, 16, bf), bad, "recv_capacity"));
    EXPECT_TRUE(failsWith(call(a, w, 0, o, sc, recv, capacity, t, 8, 16, bf), bad, "num_experts: 0"));
    EXPECT_TRUE(failsWith(call(a, w, 2, nullptr, sc, recv, capacity, t, 8, 16, bf), bad, "expert_offsets"));
    EXPECT_TRUE(failsWith(call(a, w, 2, o, nullptr, recv, capacity, t, 8, 16, bf), bad, "send_counts"));
    EXPECT_TRUE(failsWith(call(nullptr, w, 2, o, sc, recv, capacity, 5, 8, 16, bf), bad, "a: NULL"));
    EXPECT_TRUE(failsWith(call(a, nullptr, 2, o, sc, recv, capacity, t, 8, 16, bf), bad, "w: NULL"));
    EXPECT_TRUE(failsWith(call(a, w, 2, o, sc, nullptr, capacity, t, 8, 16, bf), bad, "recv: NULL"));
    const auto* a2 = static_cast<const uint8_t*>(a) + 2;  // one element off the 16 bytes the tile loads
    const auto* w2 = static_cast<const uint8_t*>(w) + 2;
    EXPECT_TRUE(failsWith(call(a2, w, 2, o, sc, recv, capacity, t, 8, 16, bf), bad, "a: does not start on 16 bytes"));
    EXPECT_TRUE(failsWith(call(a, w2, 2, o, sc, recv, capacity, t, 8, 16, bf), bad, "w: does not start on 16 bytes"));
    std::vector<uint8_t> notHeap(capacity * 16 * 2);
    EXPECT_TRUE(failsWith(call(a, w, 2, o, sc, notHeap.data(), capacity, t, 8, 16, bf), bad, "recv: must be a buffer"));
    EXPECT_TRUE(failsWith(call(a, w, 2, o, sc, recv, capacity + 1, t, 8, 16, bf), bad, "recv:"));
    EXPECT_TRUE(failsWith(call(recv, w, 2, o, sc, recv, capacity, 4, 8, 16, bf), bad, "a: overlaps recv"));
    // Each entry point names itself: the plain call is not reported as the grouped one.
    EXPECT_TRUE(failsWith(call(a, w, 2, o, sc, recv, capacity, t, 6, 16, bf), bad, "weft_grouped_gemm_alltoall: k: 6"));
    EXPECT_TRUE(failsWith(weft_gemm_alltoall(comm, a, w, sc, recv, capacity, nullptr, t, 6, 16, bf, nullptr), bad,
                          "weft_gemm_alltoall: k: 6 is not a multiple of 8"));
    // Nothing ran, nothing is owed: the next op pairs up on every rank.
    gemmCase(comm, c, rank, recv, capacity);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(2, body));
}

}  // namespace
}  // namespace weft::test
