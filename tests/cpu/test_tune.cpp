// weftctl tune on the CPU backend, end to end: `measure` runs a small sweep on 1 and 2 ranks and
// writes a table that parses, carries the model, date and commit, and chooses for every measured
// point the path it reported fastest; `show` says which row decides, or that the fallback does,
// or that gemv_path or gemm_path forces the path; bad arguments are named.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "runtime/path_table.hpp"

namespace {

struct CtlRun {
  int rc = -1;
  std::string output;  // stdout and stderr
};

CtlRun weftctl(const std::string& env, const std::string& args) {
  CtlRun r;
  const std::string command = env + " '" WEFT_TEST_WEFTCTL "' " + args + " 2>&1";
  FILE* p = popen(command.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t got; (got = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, got);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string tempPath(const char* name) {
  return ::testing::TempDir() + "/weft_tune_" + std::to_string(getpid()) + "_" + name;
}

TEST(TuneMeasure, WritesATableThatParsesAndChoosesWhatItMeasuredFastest) {
  const std::string out = tempPath("measured.tsv");
  const CtlRun run = weftctl("",
                             "tune measure --ranks 1,2 --batch 1,8 --n 64 --k 32,96 --iters 2 --samples 3 "
                             "--commit 0123456abc --out " +
                                 out);
  ASSERT_EQ(run.rc, 0) << run.output;
  const std::string text = readAll(out);
  const weft::PathTable t = weft::PathTable::parse(text, out);
  ASSERT_FALSE(t.rows().empty()) << text;
  const std::regex provenance("[0-9]{4}-[0-9]{2}-[0-9]{2}@0123456abc");
  for (const weft::PathRow& r : t.rows()) {
    EXPECT_EQ(r.op, weft::FusedOp::kGemvAllReduce);
    EXPECT_EQ(r.gpu, "cpu");
    EXPECT_TRUE(r.ranks == 1 || r.ranks == 2) << r.ranks;
    EXPECT_EQ(r.perGpu, 1) << "the CPU backend's ranks share no GPU";
    EXPECT_TRUE(std::regex_match(r.measured, provenance)) << r.measured;
  }
  // Each point's times are in the comments, with the fastest path named; the rows must choose it.
  const std::regex group(R"(^# ([0-9]+) rank\(s\), ([0-9]+) on a GPU, n ([0-9]+), k_local ([0-9]+): us per op.*)");
  const std::regex point(R"(^#   batch ([0-9]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)  -> ([a-z_]+)$)");
  std::istringstream lines(text);
  int ranks = 0, perGpu = 0, points = 0;
  uint64_t n = 0, k = 0;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, group)) {
      ranks = std::stoi(m[1]);
      perGpu = std::stoi(m[2]);
      n = std::stoull(m[3]);
      k = std::stoull(m[4]);
    } else if (std::regex_match(line, m, point)) {
      ++points;
      const weft::PathChoice c =
          t.choose(weft::FusedOp::kGemvAllReduce, {"cpu", ranks, perGpu}, {{std::stoull(m[1]), n, k}});
      ASSERT_NE(c.row, nullptr) << line;
      EXPECT_EQ(weft::pathName(c.path), m[6].str()) << line;
    }
  }
  EXPECT_EQ(points, 2 * 2 * 2) << text;  // ranks x k x batch
  std::remove(out.c_str());
}

// The points of a table of an op with two paths, `fused` and `other` in the times' order: each
// point's comment names the faster (ties go to `other`), and the rows choose it. Returns how many
// points the table has.
size_t pointsChosenAsMeasured(const std::string& text, const weft::PathTable& t, weft::FusedOp op,
                              const std::string& other) {
  const char* const* names = weft::shapeNames(op);
  const std::regex group("^# ([0-9]+) rank\\(s\\), ([0-9]+) on a GPU, " + std::string(names[1]) + " ([0-9]+), " +
                         names[2] + " ([0-9]+): us per op \\(fused " + other + "\\)$");
  const std::regex point("^#   " + std::string(names[0]) + " ([0-9]+) +([0-9.]+) +([0-9.]+)  -> (fused|" + other +
                         ")$");
  std::istringstream lines(text);
  int ranks = 0, perGpu = 0;
  size_t points = 0;
  uint64_t second = 0, third = 0;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, group)) {
      ranks = std::stoi(m[1]);
      perGpu = std::stoi(m[2]);
      second = std::stoull(m[3]);
      third = std::stoull(m[4]);
    } else if (std::regex_match(line, m, point)) {
      ++points;
      EXPECT_EQ(m[4].str(), std::stod(m[3]) <= std::stod(m[2]) ? other : "fused") << line;
      const weft::PathChoice c = t.choose(op, {"cpu", ranks, perGpu}, {{std::stoull(m[1]), second, third}});
      EXPECT_NE(c.row, nullptr) << line;
      if (c.row) {
        EXPECT_EQ(weft::pathName(c.path), m[4].str()) << line;
      }
    }
  }
  return points;
}

// The GEMM + All-to-All: fused against blas (on the CPU backend the engine's stand-in for the
// vendor BLAS), the rows choosing what each point measured fastest; 3 ranks split neither token
// count evenly.
TEST(TuneMeasure, TheGemmSweepChoosesBetweenFusedAndBlas) {
  const std::string out = tempPath("gemm.tsv");
  const CtlRun run = weftctl("",
                             "tune measure --op gemm_alltoall --ranks 1,3 --tokens 8,40 --k 16 --h 24,64 --iters 2 "
                             "--samples 3 --commit 0123456abc --out " +
                                 out);
  ASSERT_EQ(run.rc, 0) << run.output;
  const std::string text = readAll(out);
  const weft::PathTable t = weft::PathTable::parse(text, out);
  ASSERT_FALSE(t.rows().empty()) << text;
  for (const weft::PathRow& r : t.rows()) EXPECT_EQ(r.op, weft::FusedOp::kGemmAllToAll);
  const size_t points = pointsChosenAsMeasured(text, t, weft::FusedOp::kGemmAllToAll, "blas");
  EXPECT_EQ(points, 2u * 2 * 2) << text;  // ranks x h x tokens
  std::remove(out.c_str());
}

// The embedding-bag + All-to-All: fused against unfused (pooled into a buffer, then sent), the rows
// choosing what each point measured fastest; 3 ranks, tables of two widths.
TEST(TuneMeasure, TheEmbeddingSweepChoosesBetweenFusedAndUnfused) {
  const std::string out = tempPath("embedding.tsv");
  const CtlRun run =
      weftctl("",
              "tune measure --op embedding_alltoall --ranks 1,3 --local-batch 4,24 --tables 2 --dim 8,36 "
              "--iters 2 --samples 3 --commit 0123456abc --out " +
                  out);
  ASSERT_EQ(run.rc, 0) << run.output;
  const std::string text = readAll(out);
  const weft::PathTable t = weft::PathTable::parse(text, out);
  ASSERT_FALSE(t.rows().empty()) << text;
  for (const weft::PathRow& r : t.rows()) EXPECT_EQ(r.op, weft::FusedOp::kEmbeddingAllToAll);
  const size_t points = pointsChosenAsMeasured(text, t, weft::FusedOp::kEmbeddingAllToAll, "unfused");
  EXPECT_EQ(points, 2u * 2 * 2) << text;  // ranks x dim x local_batch
  std::remove(out.c_str());
}

TEST(TuneShow, NamesTheDecidingRowTheFallbackOrTheForcingSetting) {
  const std::string table = tempPath("show.tsv");
  std::ofstream(table) << "# a hand-written table\n"
                          "gemv_allreduce cpu 2 8 * * fused_rsag 2026-11-22@ab36614\n"
                          "gemv_allreduce * 2 64 1024 * unfused -\n"
                          "embedding_alltoall cpu 4 2 * * * unfused -\n";
  const std::string env = "WEFT_PATH_TABLE_FILE=" + table;
  CtlRun r = weftctl(env, "tune show --op gemv_allreduce --ranks 2 --shape 8,4096,512");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("table: " + table + " (3 rows)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gpu model: cpu"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("batch 8, n 4096, k_local 512: fused_rsag (line 2: gemv_allreduce"), std::string::npos)
      << r.output;
  r = weftctl(env, "tune show --op gemv_allreduce --ranks 2 --shape 9,1024,512");
  EXPECT_NE(r.output.find(": unfused (line 3: "), std::string::npos) << r.output;
  // Another model skips the first row; a shape past every row takes the fallback.
  r = weftctl(env, "tune show --op gemv_allreduce --ranks 2 --shape 8,4096,512 --gpu NVIDIA_H100_80GB_HBM3");
  EXPECT_NE(r.output.find("gpu model: NVIDIA_H100_80GB_HBM3 (--gpu)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": blas (no row covers it: the fallback, the vendor BLAS's GEMV"), std::string::npos)
      << r.output;
  r = weftctl(env, "tune show --op gemm_alltoall --ranks 4 --shape 256,14336,4096");
  EXPECT_NE(r.output.find("tokens 256, k 14336, h 4096: fused (no row covers it: the fallback, the fused op"),
            std::string::npos)
      << r.output;
  r = weftctl(env, "tune show --op embedding_alltoall --ranks 4 --shape 4096,8,128");
  EXPECT_NE(r.output.find(": fused (no row covers it: the fallback, the fused op"), std::string::npos) << r.output;
  // Ranks that share a GPU read the rows for their per_gpu.
  r = weftctl(env, "tune show --op embedding_alltoall --ranks 4 --per-gpu 2 --shape 4096,8,128");
  EXPECT_NE(r.output.find("4 rank(s) of cpu (2 on a GPU)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": unfused (line 4: embedding_alltoall"), std::string::npos) << r.output;
  r = weftctl(env + " WEFT_EMBEDDING_PATH=unfused", "tune show --op embedding_alltoall --ranks 4 --shape 4096,8,128");
  EXPECT_NE(r.output.find(": unfused (embedding_path forces it)"), std::string::npos) << r.output;
  r = weftctl(env + " WEFT_GEMM_PATH=fused", "tune show --op gemm_alltoall --ranks 4 --shape 256,14336,4096");
  EXPECT_NE(r.output.find(": fused (gemm_path forces it)"), std::string::npos) << r.output;
  r = weftctl(env + " WEFT_GEMV_PATH=unfused", "tune show --op gemv_allreduce --ranks 2 --shape 8,4096,512");
  EXPECT_NE(r.output.find(": unfused (gemv_path forces it)"), std::string::npos) << r.output;
  std::remove(table.c_str());
}

TEST(Tune, BadArgumentsAreNamed) {
  struct Case {
    const char* args;
    const char* mention;
  } cases[] = {
      {"tune show --op gemv_reduce --ranks 2 --shape 1,2,3", "--op: 'gemv_reduce' is not gemv_allreduce"},
      {"tune show --op gemv_allreduce --ranks 2", "--op: needs --ranks and --shape"},
      {"tune show --op gemv_allreduce --ranks 2 --per-gpu 3 --shape 1,2,3", "--per-gpu: 3 is not 1 to --ranks (2)"},
      {"tune show --op gemv_allreduce --ranks 2 --shape 65,8,8", "--shape: batch 65 is past"},
      {"tune show --op embedding_alltoall --ranks 2 --shape 1,2", "local_batch,num_tables,dim"},
      {"tune show --op gemm_alltoall --ranks 2 --shape 256,14336", "--shape: '256,14336' is not three"},
      {"tune measure --ranks 2", "--out: where to write the table"},
      {"tune measure --out - ", "--ranks: the world sizes"},
      {"tune measure --ranks 1 --out - --commit xyz", "--commit: 'xyz' is not 7 to 40 hex digits"},
      {"tune measure --ranks 1 --out - --dtype int8", "--dtype: 'int8' is not float32"},
      {"tune measure --ranks 1 --out - --batch 65", "--batch: '65' is not a whole number in [1, 64]"},
      {"tune measure --ranks 1 --out - --op embedding", "--op: 'embedding' is not gemv_allreduce, gemm_alltoall or"},
      {"tune measure --ranks 1 --out - --dim 16", "--dim: only for --op embedding_alltoall"},
      {"tune measure --ranks 1 --out - --op embedding_alltoall --k 16",
       "--k: only for --op gemv_allreduce or gemm_alltoall"},
      {"tune measure --ranks 1 --out - --op embedding_alltoall --dim 6", "--dim: 6 is not a multiple of 4"},
      {"tune measure --ranks 1 --out - --tokens 8", "--tokens: only for --op gemm_alltoall"},
      {"tune measure --ranks 1 --out - --op gemm_alltoall --batch 8", "--batch: only for --op gemv_allreduce"},
      {"tune measure --ranks 1 --out - --op gemm_alltoall --h 12", "--h: 12 is not a multiple of 8"},
      {"tune measure --ranks 1 --out - --op gemm_alltoall --dtype float32", "--dtype: the GEMM takes float16"},
  };
  for (const Case& c : cases) {
    const CtlRun r = weftctl("", c.args);
    EXPECT_NE(r.rc, 0) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.mention), std::string::npos) << c.args << ": " << r.output;
    // A malformed question gets its error alone, not the table first.
    EXPECT_EQ(r.output.find("table: "), std::string::npos) << c.args << ": " << r.output;
  }
}

}  // namespace
