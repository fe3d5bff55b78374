// GEMV + AllReduce on every backend (tests/support/op_rank.hpp): every dtype, batch 1 to 64, odd n
// and k (vector tails), empty shapes, as the path table runs it and with each path forced, against
// a float64 reference on fresh random data.
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/gemv_cases.hpp"
#include "support/multirank.hpp"

namespace weft::test {
namespace {

constexpr GemvShape kShapes[] = {{1, 1, 1},    {1, 7, 13},    {3, 300, 256}, {8, 64, 1000},
                                 {64, 33, 17}, {17, 161, 40}, {2, 0, 5},     {5, 9, 0}};
// On GPUs also (too slow for the CPU engine's suite), the tensor-core streams with tails in n and
// k (k a multiple of 8, not of a step): batch 2 and 6 read w in row runs (one and four rows per
// load); 9, 12, 24, 40 and 64 split k over the warps (one, two and four batch tiles of 16, partly
// filled; k below one step and past the last whole one); and the decode shapes of the benchmark.
constexpr GemvShape kGpuShapes[] = {{1, 8192, 2048}, {8, 8192, 512}, {32, 8192, 256},  {3, 301, 77},
                                    {2, 97, 1000},   {6, 75, 5000},  {12, 1000, 1096}, {9, 64, 136},
                                    {24, 200, 4104}, {40, 97, 2056}, {64, 130, 24}};
// The GPU shapes each forced path also runs: the decode shapes, where every rank owns a slice,
// and 64 x 130 (5 slices: fused_rsag runs one-shot on more ranks).
constexpr GemvShape kGpuPathShapes[] = {{1, 8192, 2048}, {32, 8192, 256}, {64, 130, 24}};
// y (the inputs are allocations of their own, GemvOnBackend).
constexpr size_t kBytes = 64 * 8192 * 4;

std::vector<GemvShape> shapes(const GemvShape* gpuOnly, size_t gpuCount) {
  std::vector<GemvShape> out(std::begin(kShapes), std::end(kShapes));
  if (kOnGpu) out.insert(out.end(), gpuOnly, gpuOnly + gpuCount);
  return out;
}

class GemvAllReduce : public OnEveryBackend {};

// As the path table runs it.
TEST_P(GemvAllReduce, EveryDtypeAndShape) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, kBytes);
    ASSERT_NE(r.comm, nullptr);
    uint64_t s = seed;
    for (weft_dtype_t dt : kDtypes)
      for (const GemvShape& shape : shapes(kGpuShapes, std::size(kGpuShapes))) gemvCase(r, rank, n, dt, shape, s += 2);
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

// Each path forced (gemv_path): fused_rsag runs one-shot where a rank would own no slice (the
// shapes have both); blas runs the vendor BLAS's GEMV under the GPU's launched engine and weft's
// elsewhere; no_scratch asks for fused but sets gemv_scratch_bytes to 0, so the partials cannot be
// exchanged and the unfused path runs.
TEST_P(GemvAllReduce, EveryPathForced) {
  const uint64_t seed = freshSeed();
  for (const std::string path : {"fused", "fused_rsag", "unfused", "blas", "no_scratch"}) {
    const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
      setenv("WEFT_GEMV_PATH", path == "no_scratch" ? "fused" : path.c_str(), 1);
      if (path == "no_scratch") setenv("WEFT_GEMV_SCRATCH_BYTES", "0", 1);
      OpRank r = openRank(rank, n, id, kBytes);
      ASSERT_NE(r.comm, nullptr);
      uint64_t s = seed;
      for (weft_dtype_t dt : kDtypes)
        for (const GemvShape& shape : shapes(kGpuPathShapes, std::size(kGpuPathShapes))) {
          SCOPED_TRACE(path);
          gemvCase(r, rank, n, dt, shape, s += 2);
        }
      closeRank(r);
    };
    EXPECT_TRUE(runRanks(ranks(), body)) << path;
  }
}

WEFT_INSTANTIATE_ON_EVERY_BACKEND(GemvAllReduce);

}  // namespace
}  // namespace weft::test
