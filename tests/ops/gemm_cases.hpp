// One GEMM + All-to-All case on any backend: a rank's inputs in the backend's memory, the op on
// them, and what it received against the float64 reference (tests/support/gemm_data.hpp).
#pragma once

#include <vector>

#include "support/gemm_data.hpp"
#include "support/multirank.hpp"
#include "support/op_rank.hpp"
#include "support/oracle.hpp"

namespace weft::test {

struct GemmShape {
  int64_t tokens, k, h, experts;
};
// The suite's shapes on every backend: {300, 40, 264, 1} has 3 row tiles, an odd group; {520, 264, 264, 3} three
// experts over five row tiles; then empty rows, k and h.
inline constexpr GemmShape kGemmShapes[] = {{300, 40, 264, 1},  {37, 8, 8, 1}, {1, 16, 136, 3}, {260, 136, 128, 4},
                                            {520, 264, 264, 3}, {5, 0, 16, 1}, {0, 8, 24, 1},   {9, 24, 0, 2}};
// On GPUs also (too slow for the CPU engine's suite): 17 k slices, so the sm_90a tile's 4-stage
// ring wraps four times (the second over a whole grid of 4 x 3 tiles); 8 row tiles and two
// experts with random ends.
inline constexpr GemmShape kGemmGpuShapes[] = {{200, 1032, 520, 2}, {512, 1032, 520, 1}, {1024, 136, 264, 2}};

// Rows of recv the suites give every shape (each rank receives at most 4 x 1024 rows of the
// widest, h 520).
inline constexpr int64_t kGemmCapacity = 4 * 1024, kGemmMaxH = 520;

// The shapes of the backend the suite runs on.
inline std::vector<GemmShape> gemmShapes() {
  std::vector<GemmShape> shapes(std::begin(kGemmShapes), std::end(kGemmShapes));
  if (kOnGpu) shapes.insert(shapes.end(), std::begin(kGemmGpuShapes), std::end(kGemmGpuShapes));
  return shapes;
}

// recvCounts starts as -7 in every entry, so that an entry the op did not write shows.
struct GemmOnBackend : BackendCopies {
  void* a = nullptr;
  void* w = nullptr;
  int64_t* sendCounts = nullptr;
  int64_t* expertOffsets = nullptr;
  int64_t* recvCounts = nullptr;
  GemmOnBackend(const GemmInputs& in, int nranks) {
    a = copy(in.a);
    w = copy(in.w);
    sendCounts = copy(in.sendCounts);
    expertOffsets = copy(in.expertOffsets);
    recvCounts = copy(std::vector<int64_t>(nranks, -7));
  }
};

// The op into r.heap on r's stream (recv_counts too unless `counts` is false).
inline weft_result_t runGemm(OpRank& r, const GemmCase& c, int rank, const GemmOnBackend& in, int64_t capacity,
                             bool counts = true) {
  return weft_grouped_gemm_alltoall(r.comm, in.a, in.w, c.experts, c.experts > 1 ? in.expertOffsets : nullptr,
                                    in.sendCounts, r.heap, capacity, counts ? in.recvCounts : nullptr, c.tokens(rank),
                                    c.k, c.h, c.dtype, r.stream);
}

// What r.heap (capacity rows) and, if `counts`, recv_counts hold after the op.
inline ::testing::AssertionResult receivedGemm(const OpRank& r, const GemmCase& c, int rank, const GemmOnBackend& in,
                                               int64_t capacity, bool counts = true) {
  const std::vector<uint8_t> out = download(r.heap, capacity * c.h * dtypeBytes(c.dtype));
  std::vector<uint8_t> got;
  if (counts) got = download(in.recvCounts, c.nranks * sizeof(int64_t));
  return checkGemm(out.data(), counts ? reinterpret_cast<const int64_t*>(got.data()) : nullptr, c, rank, capacity);
}

// Case `c` on fresh inputs into a poisoned r.heap of `capacity` rows, waited for and checked.
inline void gemmCase(OpRank& r, const GemmCase& c, int rank, int64_t capacity, bool counts = true) {
  SCOPED_TRACE(::testing::Message() << dtypeName(c.dtype) << " max tokens " << c.maxTokens << " k " << c.k << " h "
                                    << c.h << " experts " << c.experts << " seed " << c.seed);
  const GemmOnBackend in(gemmInputs(c, rank), c.nranks);
  poisonBytes(r.heap, capacity * c.h * dtypeBytes(c.dtype));
  WEFT_ASSERT_OK(runGemm(r, c, rank, in, capacity, counts));
  ASSERT_TRUE(finish(r));
  EXPECT_TRUE(receivedGemm(r, c, rank, in, capacity, counts));
}

}  // namespace weft::test
