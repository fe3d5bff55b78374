// GEMV + AllReduce's settings and arguments (its cases on every backend are tests/ops/test_gemv.cpp):
// ranks that would take different paths fail init; every bad argument is named, with the
// communicator still usable after.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/gemv_cases.hpp"
#include "support/multirank.hpp"

namespace weft::test {
namespace {

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
    OpRank r = openRank(rank, n, id, 4096);
    ASSERT_NE(r.comm, nullptr);
    const weft_comm_t comm = r.comm;
    void* y = r.heap;
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
    gemvCase(r, rank, n, WEFT_BFLOAT16, GemvShape{4, 16, 40}, seed);
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(2, body));
}

}  // namespace
}  // namespace weft::test
