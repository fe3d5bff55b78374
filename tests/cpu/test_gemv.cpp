// GEMV + AllReduce on 1-4 ranks (separate processes): every dtype, batch 1 to 64, odd n and k
// (vector tails), empty shapes, each path, against a float64 reference on
// fresh random data; ranks that would take different paths fail init; and every bad argument
// named, with the communicator still usable after.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/multirank.hpp"
#include "support/oracle.hpp"

namespace weft::test {
namespace {

struct Shape {
  int64_t batch, n, k;
};
constexpr Shape kShapes[] = {{1, 1, 1},    {1, 7, 13},    {3, 300, 256}, {8, 64, 1000},
                             {64, 33, 17}, {17, 161, 40}, {2, 0, 5},     {5, 9, 0}};

void gemvCase(weft_comm_t comm, void* y, int rank, int nranks, weft_dtype_t dt, Shape s, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "GEMV + AllReduce " << dtypeName(dt) << " batch " << s.batch << " n " << s.n
                                    << " k " << s.k << " seed " << seed);
  std::vector<uint8_t> x(s.batch * s.k * dtypeBytes(dt)), w(s.n * s.k * dtypeBytes(dt));
  fillInput(x.data(), dt, seed, rank, 0, s.batch * s.k);
  fillInput(w.data(), dt, gemvWeightSeed(seed), rank, 0, s.n * s.k);
  poison(y, s.batch * s.n * dtypeBytes(dt));
  WEFT_ASSERT_OK(weft_gemv_allreduce(comm, x.data(), w.data(), y, s.batch, s.n, s.k, dt, nullptr));
  EXPECT_TRUE(checkGemvAllReduce(y, dt, seed, nranks, s.batch, s.n, s.k));
}

// (ranks, path): "fused", "fused_rsag", "unfused" and "blas" force the path (gemv_path; fused_rsag
// runs one-shot where a rank would own no slice: the shapes have both; blas runs weft's GEMV, the
// CPU engine having no vendor BLAS); "no_scratch" asks for fused
// but sets gemv_scratch_bytes to 0, so the partials cannot be exchanged and the unfused path runs.
class GemvAllReduce : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(GemvAllReduce, EveryDtypeAndShape) {
  const uint64_t seed = freshSeed();
  const std::string path = std::get<1>(GetParam());
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_GEMV_PATH", path == "no_scratch" ? "fused" : path.c_str(), 1);
    if (path == "no_scratch") setenv("WEFT_GEMV_SCRATCH_BYTES", "0", 1);
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 64 * 300 * 4, &y));
    uint64_t s = seed;
    for (weft_dtype_t dt : kDtypes)
      for (const Shape& shape : kShapes) gemvCase(comm, y, rank, n, dt, shape, s += 2);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(std::get<0>(GetParam()), body));
}

INSTANTIATE_TEST_SUITE_P(Ranks, GemvAllReduce,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values("fused", "fused_rsag", "unfused", "blas", "no_scratch")),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" + std::get<1>(info.param);
                         });

// The path must be the same on every rank (the fused op's items wait on their peers'): ranks that
// disagree, by gemv_path or by their tables, fail init with the setting named, rather than hang.
TEST(GemvAllReduceTuning, RanksThatWouldTakeDifferentPathsFailInit) {
  const std::string table = ::testing::TempDir() + "/weft_path_table_" + std::to_string(getpid()) + ".tsv";
  FILE* f = std::fopen(table.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("gemv_allreduce * * * * * unfused -\n", f);
  std::fclose(f);
  for (const char* setting : {"WEFT_GEMV_PATH", "WEFT_PATH_TABLE_FILE"}) {
    SCOPED_TRACE(setting);
    const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
      if (rank == 1) setenv(setting, std::string(setting) == "WEFT_GEMV_PATH" ? "unfused" : table.c_str(), 1);
      weft_comm_t comm = nullptr;
      EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_USAGE,
                            std::string(setting) == "WEFT_GEMV_PATH" ? "gemv_path" : "path_table_file"));
      // The paths by name, as the setting takes them.
      if (std::string(setting) == "WEFT_GEMV_PATH") {
        EXPECT_NE(std::string(weft_get_last_error(nullptr)).find("uses unfused"), std::string::npos)
            << weft_get_last_error(nullptr);
      }
    };
    EXPECT_TRUE(runRanks(2, body));
  }
  std::remove(table.c_str());
  // A path that does not exist, and a table that does not parse, are named too.
  const RankBody bad = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = nullptr;
    setenv("WEFT_GEMV_PATH", "sideways", 1);
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_ARGUMENT, "gemv_path"));
    unsetenv("WEFT_GEMV_PATH");
    setenv("WEFT_PATH_TABLE_FILE", "/nonexistent/paths.tsv", 1);
    EXPECT_TRUE(
        failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_ARGUMENT, "path_table_file"));
  };
  EXPECT_TRUE(runRanks(1, bad));
}

TEST(GemvAllReduceBadInput, EveryArgumentIsNamedAndNothingIsLost) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 4096, &y));
    std::vector<float> x(64 * 8, 1.f), w(17 * 8, 1.f), notHeap(64);
    const weft_result_t bad = WEFT_ERR_INVALID_ARGUMENT;
    EXPECT_TRUE(
        failsWith(weft_gemv_allreduce(comm, x.data(), w.data(), y, 0, 16, 8, WEFT_FLOAT32, nullptr), bad, "batch"));
    EXPECT_TRUE(
        failsWith(weft_gemv_allreduce(comm, x.data(), w.data(), y, 65, 16, 8, WEFT_FLOAT32, nullptr), bad, "batch"));
    EXPECT_TRUE(
        failsWith(weft_gemv_allreduce(comm, x.data(), w.data(), y, 1, -1, 8, WEFT_FLOAT32, nullptr), bad, "n: -1"));
    EXPECT_TRUE(
        failsWith(weft_gemv_allreduce(comm, x.data(), w.data(), y, 1, 16, -3, WEFT_FLOAT32, nullptr), bad, "k_local"));
    EXPECT_TRUE(failsWith(weft_gemv_allreduce(comm, nullptr, w.data(), y, 1, 16, 8, WEFT_FLOAT32, nullptr), bad, "x"));
    EXPECT_TRUE(failsWith(weft_gemv_allreduce(comm, x.data(), nullptr, y, 1, 16, 8, WEFT_FLOAT32, nullptr), bad, "w"));
    EXPECT_TRUE(failsWith(weft_gemv_allreduce(comm, x.data(), w.data(), nullptr, 1, 16, 8, WEFT_FLOAT32, nullptr), bad,
                          "y: NULL"));
    EXPECT_TRUE(
        failsWith(weft_gemv_allreduce(comm, x.data(), w.data(), notHeap.data(), 1, 16, 8, WEFT_FLOAT32, nullptr), bad,
                  "y: must be a buffer from weft_mem_alloc"));
    EXPECT_TRUE(failsWith(weft_gemv_allreduce(comm, x.data(), w.data(), y, 64, 17, 8, WEFT_FLOAT32, nullptr), bad,
                          "y: 4352 bytes run past"));
    EXPECT_TRUE(
        failsWith(weft_gemv_allreduce(comm, y, w.data(), y, 1, 16, 8, WEFT_FLOAT32, nullptr), bad, "x: overlaps y"));
    EXPECT_TRUE(
        failsWith(weft_gemv_allreduce(comm, x.data(), y, y, 1, 16, 8, WEFT_FLOAT32, nullptr), bad, "w: overlaps y"));
    EXPECT_TRUE(failsWith(weft_gemv_allreduce(comm, x.data(), w.data(), y, 1, 16, 8, WEFT_FLOAT32, &x), bad, "stream"));
    EXPECT_TRUE(
        failsWith(weft_gemv_allreduce(nullptr, x.data(), w.data(), y, 1, 16, 8, WEFT_FLOAT32, nullptr), bad, "comm"));
    // Nothing ran, nothing is owed: the next op of every rank still pairs up.
    gemvCase(comm, y, rank, n, WEFT_BFLOAT16, Shape{4, 16, 40}, seed);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(2, body));
}

}  // namespace
}  // namespace weft::test
