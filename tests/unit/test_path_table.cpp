// The path table: rows of every op, the first match deciding (op, GPU model, ranks, shape), the
// fallback for shapes no row covers, every bad row named by origin, line and field, the
// fingerprint the ranks compare, and the built-in table (conf/path_table.tsv).
#include <gtest/gtest.h>

#include <vector>

#include "common/error.hpp"
#include "runtime/path_table.hpp"

namespace weft {
namespace {

::testing::AssertionResult parseFailsNaming(const std::string& text, const std::string& mention) {
  try {
    PathTable::parse(text, "t.tsv");
  } catch (const Error& e) {
    if (std::string(e.what()).find(mention) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "error '" << e.what() << "' does not mention '" << mention << "'";
  }
  return ::testing::AssertionFailure() << "parsed: " << text;
}

// Whether pathSetting refuses `value` for `setting` with an error that mentions `mention`.
::testing::AssertionResult settingRefused(FusedOp op, const char* value, const char* setting,
                                          const std::string& mention) {
  try {
    pathSetting(op, value, setting);
  } catch (const Error& e) {
    if (std::string(e.what()).find(mention) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "error '" << e.what() << "' does not mention '" << mention << "'";
  }
  return ::testing::AssertionFailure() << setting << " '" << value << "' accepted";
}

OpPath gemv(const PathTable& t, const std::string& gpu, int ranks, uint64_t batch, uint64_t n, uint64_t k) {
  return t.choose(FusedOp::kGemvAllReduce, {gpu, ranks, 1}, {{batch, n, k}}).path;
}

TEST(PathTable, TheFirstMatchingRowDecides) {
  const PathTable t = PathTable::parse(
      "# comment\n"
      "gemv_allreduce NVIDIA_H100 4 8 * 2048 fused 2026-11-22@ab36614  # trailing comment\n"
      "\n"
      "gemv_allreduce * 4 * * 2048 unfused -\n"
      "gemv_allreduce * * 1 8192 * unfused -\n"
      "gemv_allreduce cpu 2 64 * * fused_rsag -\n"
      "gemm_alltoall * 2 256 * * fused -\n"
      "embedding_alltoall * 2 512 8 * unfused -\n",
      "t.tsv");
  ASSERT_EQ(t.rows().size(), 6u);
  EXPECT_EQ(t.rows()[0].line, 2);
  EXPECT_EQ(t.rows()[0].gpu, "NVIDIA_H100");
  EXPECT_EQ(t.rows()[0].measured, "2026-11-22@ab36614");
  EXPECT_EQ(t.rows()[1].measured, "");
  EXPECT_EQ(gemv(t, "NVIDIA_H100", 4, 8, 8192, 2048), OpPath::kFused);    // row 1
  EXPECT_EQ(gemv(t, "NVIDIA_H200", 4, 8, 8192, 2048), OpPath::kUnfused);  // another model: row 2
  EXPECT_EQ(gemv(t, "NVIDIA_H100", 4, 9, 8192, 2048), OpPath::kUnfused);  // batch past row 1: row 2
  EXPECT_EQ(gemv(t, "cpu", 2, 1, 8192, 100000), OpPath::kUnfused);        // row 3 (any model, any ranks) first
  EXPECT_EQ(gemv(t, "cpu", 2, 1, 8193, 100000), OpPath::kFusedRsag);      // n past row 3: row 4
  EXPECT_EQ(gemv(t, "NVIDIA_H100", 2, 1, 8193, 1), OpPath::kBlas);        // no row: the fallback
  const PathChoice byRow = t.choose(FusedOp::kGemvAllReduce, {"cpu", 2, 1}, {{2, 1, 1}});
  ASSERT_NE(byRow.row, nullptr);
  EXPECT_EQ(byRow.row->line, 6);
  // Rows of one op never decide another's.
  EXPECT_EQ(t.choose(FusedOp::kGemmAllToAll, {"cpu", 2, 1}, {{256, 8, 8}}).row->line, 7);
  EXPECT_EQ(t.choose(FusedOp::kGemmAllToAll, {"cpu", 2, 1}, {{257, 8, 8}}).row, nullptr);
  EXPECT_EQ(t.choose(FusedOp::kEmbeddingAllToAll, {"cpu", 2, 1}, {{512, 8, 1024}}).path, OpPath::kUnfused);
  EXPECT_EQ(t.choose(FusedOp::kEmbeddingAllToAll, {"cpu", 2, 1}, {{512, 9, 1024}}).row, nullptr);  // 9 tables
  EXPECT_EQ(t.choose(FusedOp::kEmbeddingAllToAll, {"cpu", 4, 1}, {{1, 1, 1}}).row, nullptr);
}

TEST(PathTable, AShapeNoRowCoversTakesThePathThatCannotLose) {
  const PathTable empty = PathTable::parse("", "empty");
  const PathChoice g = empty.choose(FusedOp::kGemvAllReduce, {"cpu", 4, 1}, {{1, 1, 1}});
  EXPECT_EQ(g.path, OpPath::kBlas);  // the vendor BLAS's GEMV, then weft's AllReduce
  EXPECT_EQ(g.row, nullptr);
  EXPECT_EQ(fallbackPath(FusedOp::kGemvAllReduce), OpPath::kBlas);
  // The GEMM's is the fused op: its blas path pays the routing op's fixed cost, so it can lose.
  EXPECT_EQ(empty.choose(FusedOp::kGemmAllToAll, {"cpu", 4, 1}, {{1, 1, 1}}).path, OpPath::kFused);
  EXPECT_EQ(fallbackPath(FusedOp::kGemmAllToAll), OpPath::kFused);
  // The embedding's is the fused op; unfused moves every vector through the device's memory twice.
  EXPECT_EQ(empty.choose(FusedOp::kEmbeddingAllToAll, {"cpu", 4, 1}, {{1, 1, 1}}).path, OpPath::kFused);
  EXPECT_EQ(fallbackPath(FusedOp::kEmbeddingAllToAll), OpPath::kFused);
}

TEST(PathTable, EveryBadRowIsNamedByOriginLineAndField) {
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 4 8 * fused -\n", "t.tsv:1: expected 9 fields"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 4 1 8 * 1 fused - extra\n", "t.tsv:1: expected 9 fields"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 4 x 8 * 1 fused -\n", "t.tsv:1: per_gpu 'x'"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 4 0 8 * 1 fused -\n", "per_gpu '0'"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 4 2000000 8 * 1 fused -\n", "per_gpu '2000000' is too large"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 4 1 8 * 1 sideways -\n", "path 'sideways'"));
  // A header declares its rows' format: a row of the new one that lost a field is not read shifted.
  EXPECT_TRUE(parseFailsNaming(tableHeader() + "\ngemv_allreduce cpu 2 1 8 * fused -\n", "t.tsv:2: expected 9 fields"));
  EXPECT_TRUE(parseFailsNaming("# op gpu ranks max1 max2 max3 path measured\ngemv_allreduce cpu 2 1 8 * * fused -\n",
                               "t.tsv:2: expected 8 fields (the header above has no per_gpu)"));
  EXPECT_NO_THROW(
      PathTable::parse(tableHeader() + "\ngemv_allreduce cpu 2 1 8 * * fused -\n" +
                           "# op gpu ranks max1 max2 max3 path measured\ngemv_allreduce cpu 2 8 * * fused -\n",
                       "t.tsv"));  // tables of both formats, one after the other
  EXPECT_TRUE(parseFailsNaming("\ngemv_allreduce * 4 8 * 1 sideways -\n", "t.tsv:2: path 'sideways' is not"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 4 -8 * 1 fused -\n", "t.tsv:1: batch_max '-8'"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 4 0 * 1 fused -\n", "batch_max '0'"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 4 8 1x * fused -\n", "n_max '1x'"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 4 8 * 99999999999999999999999 fused -\n", "k_local_max"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * four 8 * * fused -\n", "ranks 'four'"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 2000000 8 * * fused -\n", "ranks '2000000' is too large"));
  EXPECT_TRUE(parseFailsNaming("gemv_reduce * 4 8 * * fused -\n", "t.tsv:1: op 'gemv_reduce' is not gemv_allreduce"));
  EXPECT_TRUE(parseFailsNaming("gemm_alltoall * 2 +8 * * fused -\n", "tokens_max '+8'"));
  EXPECT_TRUE(parseFailsNaming("embedding_alltoall * 2 8 x * fused -\n", "num_tables_max 'x'"));
  // A path the op cannot run is refused, not run as something else.
  EXPECT_TRUE(parseFailsNaming("gemm_alltoall * 2 8 * * fused_rsag -\n", "path 'fused_rsag' is not fused or blas"));
  EXPECT_TRUE(parseFailsNaming("gemm_alltoall * 2 8 * * unfused -\n", "path 'unfused' is not fused or blas"));
  EXPECT_TRUE(parseFailsNaming("embedding_alltoall * 2 8 * * blas -\n", "path 'blas' is not fused or unfused"));
  // Provenance: DATE@COMMIT or '-'.
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 2 8 * * fused yesterday\n", "t.tsv:1: measured 'yesterday'"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 2 8 * * fused 2026-11-22@xyz1234\n", "measured"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 2 8 * * fused 2026-1-22@ab36614\n", "measured"));
  EXPECT_TRUE(parseFailsNaming("gemv_allreduce * 2 8 * * fused 2026-11-22@ab3\n", "measured"));
  EXPECT_THROW(PathTable::load("/nonexistent/paths.tsv"), Error);
}

TEST(PathTable, PathSettingsNameThemselvesAndTheOp) {
  for (OpPath p : {OpPath::kFused, OpPath::kFusedRsag, OpPath::kUnfused, OpPath::kBlas}) {
    EXPECT_EQ(pathSetting(FusedOp::kGemvAllReduce, pathName(p), "gemv_path"), p);
    const std::string row = std::string("gemv_allreduce * * * * * ") + pathName(p) + " -";
    EXPECT_EQ(gemv(PathTable::parse(row, "t"), "cpu", 2, 1, 1, 1), p);
  }
  EXPECT_EQ(pathSetting(FusedOp::kGemvAllReduce, "auto", "gemv_path"), std::nullopt);
  EXPECT_TRUE(settingRefused(FusedOp::kGemvAllReduce, "oneshot", "gemv_path",
                             "gemv_path: 'oneshot' is not auto, blas, unfused, fused or fused_rsag"));
  EXPECT_EQ(pathSetting(FusedOp::kGemmAllToAll, "blas", "gemm_path"), OpPath::kBlas);
  EXPECT_EQ(pathSetting(FusedOp::kGemmAllToAll, "fused", "gemm_path"), OpPath::kFused);
  EXPECT_TRUE(settingRefused(FusedOp::kGemmAllToAll, "unfused", "gemm_path",
                             "gemm_path: 'unfused' is not auto, fused or blas (gemm_alltoall)"));
  EXPECT_EQ(pathSetting(FusedOp::kEmbeddingAllToAll, "unfused", "embedding_path"), OpPath::kUnfused);
  EXPECT_EQ(pathSetting(FusedOp::kEmbeddingAllToAll, "fused", "embedding_path"), OpPath::kFused);
  EXPECT_TRUE(settingRefused(FusedOp::kEmbeddingAllToAll, "blas", "embedding_path",
                             "embedding_path: 'blas' is not auto, fused or unfused (embedding_alltoall)"));
  for (FusedOp op : {FusedOp::kGemvAllReduce, FusedOp::kGemmAllToAll, FusedOp::kEmbeddingAllToAll})
    EXPECT_EQ(opNamed(opName(op)), op);
}

// per_gpu tells a job whose ranks have a GPU each from one whose ranks share (under MPS): each
// rank's kernels then hold its share of the device while the vendor's take the process's, so the
// faster path differs. A row of the format before per_gpu (8 fields) matches either.
TEST(PathTable, RowsMatchTheRanksThatShareAGpu) {
  const PathTable t = PathTable::parse(
      "gemm_alltoall  NVIDIA_H200  2  2  8192  *  *  blas   -\n"
      "gemm_alltoall  NVIDIA_H200  2  1  8192  *  *  fused  -\n"
      "gemv_allreduce NVIDIA_H200  2  *  8     *  *  fused  -\n"
      "gemv_allreduce NVIDIA_H200  2     16    *  *  unfused -\n"
      "embedding_alltoall * * 4 * * * unfused -\n",
      "t.tsv");
  ASSERT_EQ(t.rows().size(), 5u);
  EXPECT_EQ(t.rows()[0].perGpu, 2);
  EXPECT_EQ(t.rows()[2].perGpu, 0);
  EXPECT_EQ(t.rows()[3].perGpu, 0) << "8 fields: per_gpu '*'";
  EXPECT_EQ(t.rows()[3].maxima[0], 16u);
  const OpShape gemmShape{{4096, 14336, 4096}};
  EXPECT_EQ(t.choose(FusedOp::kGemmAllToAll, {"NVIDIA_H200", 2, 2}, gemmShape).row->line, 1);
  EXPECT_EQ(t.choose(FusedOp::kGemmAllToAll, {"NVIDIA_H200", 2, 1}, gemmShape).row->line, 2);
  EXPECT_EQ(t.choose(FusedOp::kGemmAllToAll, {"NVIDIA_H200", 4, 2}, gemmShape).row, nullptr);  // 4 ranks
  for (int perGpu : {1, 2}) {
    EXPECT_EQ(t.choose(FusedOp::kGemvAllReduce, {"NVIDIA_H200", 2, perGpu}, {{8, 1, 1}}).row->line, 3);
    EXPECT_EQ(t.choose(FusedOp::kGemvAllReduce, {"NVIDIA_H200", 2, perGpu}, {{16, 1, 1}}).row->line, 4);
  }
  EXPECT_EQ(t.choose(FusedOp::kEmbeddingAllToAll, {"cpu", 8, 4}, {{1, 1, 1}}).path, OpPath::kUnfused);
  EXPECT_EQ(t.choose(FusedOp::kEmbeddingAllToAll, {"cpu", 8, 2}, {{1, 1, 1}}).row, nullptr);
  EXPECT_EQ(t.choose(FusedOp::kEmbeddingAllToAll, {"cpu", 8, 8}, {{1, 1, 1}}).row, nullptr);
}

TEST(PathTable, FormattedRowsParseBackToTheSameRows) {
  PathRow r;
  r.op = FusedOp::kGemmAllToAll;
  r.gpu = "NVIDIA_H100_80GB_HBM3";
  r.ranks = 4;
  r.perGpu = 2;
  r.maxima[0] = 256;
  r.maxima[2] = 4096;
  r.measured = "2027-01-05@0123456789abcdef";
  const PathTable back = PathTable::parse(tableHeader() + "\n" + formatRow(r) + "\n", "t");
  ASSERT_EQ(back.rows().size(), 1u);
  const PathRow& b = back.rows()[0];
  EXPECT_EQ(b.op, r.op);
  EXPECT_EQ(b.gpu, r.gpu);
  EXPECT_EQ(b.ranks, 4);
  EXPECT_EQ(b.perGpu, 2);
  EXPECT_EQ(b.maxima[0], 256u);
  EXPECT_EQ(b.maxima[1], UINT64_MAX);
  EXPECT_EQ(b.maxima[2], 4096u);
  EXPECT_EQ(b.path, OpPath::kFused);
  EXPECT_EQ(b.measured, r.measured);
}

TEST(PathTable, FingerprintsTellDecidingRowsApartAndIgnoreTheRest) {
  const std::string row = "gemv_allreduce * 4 8 * 2048 fused -\n";
  const uint64_t same = PathTable::parse(row, "a").fingerprint();
  EXPECT_EQ(same, PathTable::parse("# other text\ngemv_allreduce  *  4  8  *  2048  fused  2026-11-22@ab36614", "b")
                      .fingerprint());  // comments, spacing and provenance do not decide
  EXPECT_NE(same, PathTable::parse("gemv_allreduce * 4 8 * 2048 unfused -\n", "c").fingerprint());
  EXPECT_NE(same, PathTable::parse("gemv_allreduce cpu 4 8 * 2048 fused -\n", "d").fingerprint());
  EXPECT_NE(same, PathTable::parse("gemv_allreduce * 2 8 * 2048 fused -\n", "e").fingerprint());
  EXPECT_NE(same, PathTable::parse("gemm_alltoall * 4 8 * 2048 fused -\n", "f").fingerprint());
  EXPECT_EQ(same, PathTable::parse("gemv_allreduce * 4 * 8 * 2048 fused -\n", "i").fingerprint());  // per_gpu '*'
  EXPECT_NE(same, PathTable::parse("gemv_allreduce * 4 1 8 * 2048 fused -\n", "j").fingerprint());
  EXPECT_NE(same, PathTable::parse(row + row, "g").fingerprint());
  EXPECT_NE(same, PathTable::parse("", "h").fingerprint());
}

// The built-in table keeps the GEMV choices measured before GPU models were in the table, for
// every GPU: fused to batch 8, the vendor BLAS's GEMV from batch 9 (the API's batch is 1..64);
// one rank of an H200 or an H100 has rows of its own (below).
TEST(PathTable, TheBuiltInTableParsesAndKeepsTheMeasuredGemvChoices) {
  const PathTable builtIn = PathTable::load("");
  EXPECT_NE(builtIn.origin().find("conf/path_table.tsv"), std::string::npos);
  for (const char* gpu : {"NVIDIA_H200", "NVIDIA_H100_80GB_HBM3", "cpu"})
    for (int ranks : {1, 2, 3, 4, 8})
      for (uint64_t k : {uint64_t{2048}, uint64_t{14336}, uint64_t{28672}}) {
        if (std::string(gpu) != "cpu" && ranks == 1) continue;
        SCOPED_TRACE(std::string(gpu) + " ranks " + std::to_string(ranks) + " k " + std::to_string(k));
        EXPECT_EQ(gemv(builtIn, gpu, ranks, 1, 8192, k), OpPath::kFused);
        EXPECT_EQ(gemv(builtIn, gpu, ranks, 8, 8192, k), OpPath::kFused);
        EXPECT_EQ(gemv(builtIn, gpu, ranks, 9, 8192, k), OpPath::kBlas);
        EXPECT_EQ(gemv(builtIn, gpu, ranks, 64, 8192, k), OpPath::kBlas);
      }
  for (const PathRow& r : builtIn.rows()) {
    if (r.gpu.empty()) continue;
    EXPECT_FALSE(r.measured.empty()) << "line " << r.line << ": a model's row says who measured it";
    EXPECT_NE(r.perGpu, 0) << "line " << r.line << ": a measured row says whether the ranks shared a GPU";
  }
}

// One rank of an H200: with no exchange to hide, the path is whichever GEMV is faster there; at
// 8192 rows cuBLAS's to k 8192 (and at batch 5-8 to k 14336), weft's at deep k and few rows.
TEST(PathTable, OneRankOfAnH200RunsTheFasterGemv) {
  const PathTable t = PathTable::load("");
  struct Cell {
    uint64_t batch, n, k;
    OpPath path;
  };
  const OpPath blas = OpPath::kBlas, fused = OpPath::kFused;
  std::vector<Cell> cells = {
      // 8192 rows: cuBLAS's to k 8192 and at batch 5-8 to k 14336, weft's at k 28672 to batch 8.
      {1, 8192, 14336, fused},
      {4, 8192, 14336, fused},
      {5, 8192, 14336, blas},
      {8, 8192, 14336, blas},
      {9, 8192, 14336, blas},
      {1, 8192, 28672, fused},
      {8, 8192, 28672, fused},
      {16, 8192, 28672, blas},
      // 4096 rows: weft's from k 8192 (to batch 4 at 14336), cuBLAS's to k 4096 and past batch 8.
      {1, 4096, 8192, fused},
      {8, 4096, 8192, fused},
      {9, 4096, 8192, blas},
      {4, 4096, 14336, fused},
      {5, 4096, 14336, blas},
      {8, 4096, 28672, fused},
      {16, 4096, 28672, blas},
      // 16384 rows: cuBLAS's to k 20480 (and at batch 3-4 to 22528), weft's beyond to batch 8.
      {4, 16384, 20480, blas},
      {8, 16384, 20480, blas},
      {1, 16384, 22528, fused},
      {2, 16384, 22528, fused},
      {3, 16384, 22528, blas},
      {4, 16384, 22528, blas},
      {8, 16384, 22528, fused},
      {4, 16384, 24576, fused},
      {8, 16384, 28672, fused},
      {9, 16384, 28672, blas},
      // What no one-rank row measured (wider w, deeper k) runs cuBLAS's GEMV.
      {1, 32768, 2048, blas},
      {1, 8192, 57344, blas}};
  for (uint64_t batch : {1, 4, 8, 16, 64}) {
    for (uint64_t k : {2048, 4096, 8192}) cells.push_back({batch, 8192, k, blas});
    cells.push_back({batch, 4096, 4096, blas});
  }
  for (uint64_t k : {2048, 8192, 14336}) cells.push_back({1, 16384, k, blas});
  for (const Cell& c : cells)
    EXPECT_EQ(gemv(t, "NVIDIA_H200", 1, c.batch, c.n, c.k), c.path)
        << "batch " << c.batch << " n " << c.n << " k " << c.k;
  // Two ranks keep their own rows: the fused op hides the exchange behind the GEMV.
  EXPECT_EQ(gemv(t, "NVIDIA_H200", 2, 1, 8192, 4096), OpPath::kFused);
}

// One rank of an H100 (n 8192 measured): weft's GEMV at batch 1-8 from k 4096 (and at batch 1-2
// and 16 at k 1024), cuBLAS's at k 2048, from batch 16, and wherever no row measured.
TEST(PathTable, OneRankOfAnH100RunsTheFasterGemv) {
  const PathTable t = PathTable::load("");
  struct Cell {
    uint64_t batch, k;
    OpPath path;
  };
  const OpPath blas = OpPath::kBlas, fused = OpPath::kFused;
  const Cell cells[] = {{1, 1024, fused}, {2, 1024, fused},  {4, 1024, blas},  {16, 1024, fused}, {32, 1024, blas},
                        {1, 2048, blas},  {8, 2048, blas},   {1, 4096, fused}, {8, 8192, fused},  {8, 14336, fused},
                        {16, 4096, blas}, {64, 14336, blas}, {1, 28672, blas}, {9, 7168, blas}};
  for (const Cell& c : cells)
    EXPECT_EQ(gemv(t, "NVIDIA_H100_80GB_HBM3", 1, c.batch, 8192, c.k), c.path) << "batch " << c.batch << " k " << c.k;
  EXPECT_EQ(gemv(t, "NVIDIA_H100_80GB_HBM3", 1, 1, 16384, 4096), blas) << "wider w than measured";
}

// The built-in GEMM rows: cuBLAS's GEMM, then weft routing its rows, for a few hundred tokens; the
// fused op for more, on H200 (measured) and elsewhere (the '*' rows); the 2- and 4-rank H200
// exception at 8192 x 14336 x 4096, where cuBLAS's GEMM was measured faster.
TEST(PathTable, TheBuiltInTableRunsFewTokensThroughTheVendorGemm) {
  const PathTable t = PathTable::load("");
  auto gemm = [&](const char* gpu, int ranks, uint64_t tokens, uint64_t k, uint64_t h) {
    return t.choose(FusedOp::kGemmAllToAll, {gpu, ranks, 1}, {{tokens, k, h}}).path;
  };
  for (const char* gpu : {"NVIDIA_H200", "NVIDIA_H100_80GB_HBM3", "cpu"})
    for (int ranks : {1, 2, 4}) {
      SCOPED_TRACE(std::string(gpu) + " ranks " + std::to_string(ranks));
      EXPECT_EQ(gemm(gpu, ranks, 128, 14336, 4096), OpPath::kBlas);
      // 4 H200 measured the two paths within 2% there, and the sweep chose fused.
      if (std::string(gpu) != "NVIDIA_H200" || ranks != 4) {
        EXPECT_EQ(gemm(gpu, ranks, 256, 2048, 7168), OpPath::kBlas);
      }
      // One H100 rank's blas path (cuBLAS's GEMM, then a copy) measured faster to 1024 tokens.
      const bool h100 = std::string(gpu) == "NVIDIA_H100_80GB_HBM3" && ranks == 1;
      EXPECT_EQ(gemm(gpu, ranks, 1024, 2048, 7168), h100 ? OpPath::kBlas : OpPath::kFused);
      EXPECT_EQ(gemm(gpu, ranks, 4096, 2048, 7168), OpPath::kFused);
      EXPECT_EQ(gemm(gpu, ranks, 16384, 2048, 7168), OpPath::kFused);
    }
  EXPECT_EQ(gemm("NVIDIA_H200", 2, 256, 2048, 4096), OpPath::kFused);
  EXPECT_EQ(gemm("NVIDIA_H200", 2, 512, 14336, 4096), OpPath::kBlas);
  EXPECT_EQ(gemm("NVIDIA_H200", 2, 8192, 14336, 4096), OpPath::kBlas);
  EXPECT_EQ(gemm("NVIDIA_H200", 1, 8192, 14336, 4096), OpPath::kFused);
  EXPECT_EQ(gemm("NVIDIA_H200", 4, 8192, 14336, 4096), OpPath::kBlas);
  EXPECT_EQ(gemm("NVIDIA_H200", 4, 256, 2048, 7168), OpPath::kFused);
  EXPECT_EQ(gemm("NVIDIA_H200", 4, 512, 2048, 4096), OpPath::kBlas);
  EXPECT_EQ(gemm("NVIDIA_H200", 4, 1024, 14336, 4096), OpPath::kFused);
  EXPECT_EQ(gemm("NVIDIA_H200", 8, 8192, 14336, 4096), OpPath::kFused);
  EXPECT_EQ(gemm("NVIDIA_H100_80GB_HBM3", 1, 512, 14336, 4096), OpPath::kBlas);
  EXPECT_EQ(gemm("NVIDIA_H100_80GB_HBM3", 1, 1024, 14336, 4096), OpPath::kFused);
  EXPECT_EQ(gemm("NVIDIA_H100_80GB_HBM3", 1, 2048, 2048, 4096), OpPath::kBlas);
  EXPECT_EQ(gemm("NVIDIA_H100_80GB_HBM3", 2, 2048, 2048, 4096), OpPath::kFused);  // the '*' rows
}

// Ranks that share a GPU read their own rows, ahead of the '*' rows that would otherwise take
// them: on one H200 shared by 2 ranks cuBLAS's GEMM past 1024 tokens; on an H100 shared by 2 cuBLAS's GEMM from 2048
// tokens, where one rank alone runs fused, and the fused embedding (measured, as the fallback would run it).
TEST(PathTable, TheBuiltInTableHasRowsForRanksThatShareAGpu) {
  const PathTable t = PathTable::load("");
  const Placement shared{"NVIDIA_H200", 2, 2}, own{"NVIDIA_H200", 2, 1};
  auto gemmAt = [&](const Placement& p, uint64_t tokens) {
    return t.choose(FusedOp::kGemmAllToAll, p, {{tokens, 14336, 4096}}).path;
  };
  EXPECT_EQ(gemmAt(shared, 256), OpPath::kBlas);
  EXPECT_EQ(gemmAt(shared, 1024), OpPath::kFused);
  EXPECT_EQ(gemmAt(shared, 4096), OpPath::kBlas);
  EXPECT_EQ(gemmAt(own, 4096), OpPath::kFused);
  const Placement h100Shared{"NVIDIA_H100_80GB_HBM3", 2, 2}, h100One{"NVIDIA_H100_80GB_HBM3", 1, 1};
  EXPECT_EQ(t.choose(FusedOp::kGemmAllToAll, h100Shared, {{1024, 14336, 4096}}).path, OpPath::kFused);
  EXPECT_EQ(t.choose(FusedOp::kGemmAllToAll, h100Shared, {{2048, 14336, 7168}}).path, OpPath::kBlas);
  EXPECT_EQ(t.choose(FusedOp::kGemmAllToAll, h100Shared, {{4096, 2048, 7168}}).path, OpPath::kBlas);
  EXPECT_EQ(t.choose(FusedOp::kGemmAllToAll, h100One, {{4096, 2048, 7168}}).path, OpPath::kFused);
  EXPECT_EQ(t.choose(FusedOp::kGemvAllReduce, h100Shared, {{16, 8192, 4096}}).path, OpPath::kBlas);
  EXPECT_EQ(t.choose(FusedOp::kGemvAllReduce, h100Shared, {{8, 8192, 4096}}).path, OpPath::kFused);
  const OpShape bags{{4096, 8, 128}};
  for (const Placement& p : {h100Shared, h100One}) {
    const PathChoice c = t.choose(FusedOp::kEmbeddingAllToAll, p, bags);
    ASSERT_NE(c.row, nullptr) << "measured";
    EXPECT_EQ(c.path, OpPath::kFused);
  }
}

}  // namespace
}  // namespace weft
