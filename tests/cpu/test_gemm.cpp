// GEMM + All-to-All on the CPU backend (its cases on every backend are tests/ops/test_gemm.cpp):
// the blas path (the vendor BLAS's GEMM, then the op routes its rows) gives the same results, also
// where ranks take different paths, and weftctl shows it was taken; a capacity too small and
// unsound send counts fail the op on every rank, naming the rank, with nothing stored (also one
// rank's checked copy on the blas path); every bad argument is named.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/gemm_cases.hpp"
#include "support/multirank.hpp"
#include "support/queue_json.hpp"

namespace weft::test {
namespace {

// No byte of the poisoned `bytes` at `heap` was written.
void expectUntouched(const void* heap, size_t bytes) {
  const std::vector<uint8_t> recv = download(heap, bytes);
  for (size_t i = 0; i < recv.size(); ++i)
    if (recv[i] != 0xff) {
      ADD_FAILURE() << "byte " << i << " of recv was written";
      return;
    }
}

// gemm_path blas: the vendor BLAS's GEMM (on the CPU backend the engine's stand-in, on the calling
// thread), then the op routes the product's rows. Every shape of the suite against the same
// reference, first with the odd ranks fused (the paths meet in one op), then every rank blas.
// Grouped calls and empty ones run fused whatever the setting; the status page says which ran.
class GemmBlasPath : public ::testing::TestWithParam<int> {};

TEST_P(GemmBlasPath, RoutesTheProductAndRanksMayDiffer) {
  uint64_t s = freshSeed();
  for (const bool mixed : {true, false})
    // A job per dtype, so that its page's history (a few more rows than the shapes) holds every op.
    for (weft_dtype_t dt : {WEFT_BFLOAT16, WEFT_FLOAT16}) {
      const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
        const bool blas = !mixed || rank % 2 == 0;
        setenv("WEFT_GEMM_PATH", blas ? "blas" : "fused", 1);
        const int64_t capacity = 4 * 520;
        OpRank r = openRank(rank, n, id, capacity * 264 * 2);
        ASSERT_NE(r.comm, nullptr);
        uint64_t seed = s;
        int vendorOps = 0;  // the cases the blas path takes: one expert, nothing empty
        for (const GemmShape& sh : kGemmShapes) {
          const GemmCase c{++seed, n, sh.tokens, sh.k, sh.h, dt, sh.experts};
          gemmCase(r, c, rank, capacity);
          vendorOps += blas && sh.experts == 1 && c.tokens(rank) > 0 && sh.k > 0 && sh.h > 0;
        }
        const std::string json = queueJson();
        EXPECT_EQ(occurrences(json, "\"path\":\"blas\""), static_cast<size_t>(vendorOps)) << json;
        EXPECT_EQ(occurrences(json, "\"op\":\"gemm_alltoall\""), std::size(kGemmShapes)) << json;
        closeRank(r);
      };
      EXPECT_TRUE(runRanks(GetParam(), body)) << (mixed ? "odd ranks fused, " : "every rank blas, ") << dtypeName(dt);
      s += std::size(kGemmShapes);
    }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GemmBlasPath, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// Rank 1's capacity is one row short: the op fails on every rank with the same message, and no
// rank's recv or recv_counts is written.
TEST(GemmFaults, ACapacityTooSmallFailsEveryRankAndStoresNothing) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, 1 << 20);
    ASSERT_NE(r.comm, nullptr);
    GemmCase c{seed, n, 64, 16, 24, WEFT_BFLOAT16, 1};
    while (c.received(1) == 0) ++c.seed;
    const GemmOnBackend in(gemmInputs(c, rank), n);
    const int64_t capacity = rank == 1 ? c.received(1) - 1 : c.received(rank);
    poisonBytes(r.heap, 1 << 20);
    EXPECT_TRUE(
        failsWith(runGemm(r, c, rank, in, capacity), WEFT_ERR_INVALID_ARGUMENT,
                  "rank 1 would receive " + std::to_string(c.received(1)) + " rows, more than its recv_capacity"));
    for (int i = 0; i < n; ++i) EXPECT_EQ(in.recvCounts[i], -7);
    expectUntouched(r.heap, 1 << 20);
    closeFailedRank(r);
  };
  EXPECT_TRUE(runRanks(3, body));
}

TEST(GemmFaults, SendCountsThatDoNotSumToTokensFailEveryRank) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, 1 << 18);
    ASSERT_NE(r.comm, nullptr);
    const GemmCase c{seed, n, 40, 8, 16, WEFT_FLOAT16, 2};
    GemmInputs host = gemmInputs(c, rank);
    if (rank == 2) host.sendCounts[0] += 1;
    EXPECT_TRUE(failsWith(runGemm(r, c, rank, GemmOnBackend(host, n), 1 << 12, false), WEFT_ERR_INVALID_ARGUMENT,
                          "rank 2's send_counts are negative or do not sum"));
    closeFailedRank(r);
  };
  EXPECT_TRUE(runRanks(3, body));
}

// One rank on the blas path: the op is a checked copy to itself (gemm_solo_device.hpp). A capacity
// one row short, or send_counts that do not sum to its tokens, fail the op as on more ranks, with
// nothing stored, and the queue says the blas path ran.
TEST(GemmFaults, OneRankOnTheBlasPathChecksItsInput) {
  const uint64_t seed = freshSeed();
  for (const bool capacityFault : {true, false}) {
    const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
      setenv("WEFT_GEMM_PATH", "blas", 1);
      OpRank r = openRank(rank, n, id, 1 << 20);
      unsetenv("WEFT_GEMM_PATH");
      ASSERT_NE(r.comm, nullptr);
      GemmCase c{seed, n, 64, 16, 24, WEFT_BFLOAT16, 1};
      while (c.received(0) == 0) ++c.seed;
      GemmInputs host = gemmInputs(c, rank);
      if (!capacityFault) host.sendCounts[0] += 1;
      const GemmOnBackend in(host, n);
      const int64_t rows = c.received(0), capacity = capacityFault ? rows - 1 : rows;
      poisonBytes(r.heap, 1 << 20);
      const std::string why = capacityFault
                                  ? "rank 0 would receive " + std::to_string(rows) +
                                        " rows, more than its recv_capacity (" + std::to_string(capacity) + ")"
                                  : "rank 0's send_counts are negative or do not sum to its tokens";
      EXPECT_TRUE(failsWith(runGemm(r, c, rank, in, capacity), WEFT_ERR_INVALID_ARGUMENT, why));
      EXPECT_EQ(in.recvCounts[0], -7);
      expectUntouched(r.heap, 1 << 20);
      const std::string json = queueJson();
      EXPECT_EQ(occurrences(json, "\"path\":\"blas\""), 1u) << json;
      closeFailedRank(r);
    };
    EXPECT_TRUE(runRanks(1, body)) << (capacityFault ? "capacity" : "send_counts");
  }
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
      OpRank r = openRank(rank, n, id, 1 << 18);
      ASSERT_NE(r.comm, nullptr);
      const GemmCase c{seed, n, 40, 8, 16, WEFT_BFLOAT16, 1};
      OpRank shifted = r;
      shifted.heap = static_cast<uint8_t*>(r.heap) + (rank == 1 ? 4096 : 0);
      const weft_result_t result = runGemm(shifted, c, rank, GemmOnBackend(gemmInputs(c, rank), n), 1 << 12, false);
      if (check)
        EXPECT_TRUE(failsWith(result, WEFT_ERR_INVALID_USAGE, "differ in the heap offset of recv"));
      else
        EXPECT_TRUE(failsWith(result, WEFT_ERR_INVALID_ARGUMENT, "rank 1's recv is not the buffer rank 0 passed"));
      closeFailedRank(r);
    };
    EXPECT_TRUE(runRanks(3, body)) << "check_signatures " << check;
  }
}

TEST(GemmBadInput, EveryArgumentIsNamedAndNothingIsLost) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    const int64_t capacity = 200;
    OpRank r = openRank(rank, n, id, capacity * 16 * 2);
    ASSERT_NE(r.comm, nullptr);
    const weft_comm_t comm = r.comm;
    void* recv = r.heap;
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
    gemmCase(r, c, rank, capacity);
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(2, body));
}

}  // namespace
}  // namespace weft::test
