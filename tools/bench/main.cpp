// weft-bench: times weft and NCCL in the same run, on the same buffers and stream, and prints
// median times, bus bandwidth and their ratio per size (nccl-tests conventions). Start it like
// any weft job: `weftrun -n 4 weft-bench allreduce -b 16K -e 256M`.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench.hpp"

using namespace weft::bench;

namespace {

// "64", "16K", "256M", "1G" (powers of 1024).
uint64_t parseBytes(const std::string& text, const char* option) {
  size_t end = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &end);
  } catch (const std::exception&) {
    die(std::string(option) + ": '" + text + "' is not a size");
  }
  const std::string suffix = text.substr(end);
  const int shift = suffix.empty() ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : -1;
  if (shift < 0) die(std::string(option) + ": '" + text + "' is not a size (suffixes: K, M, G)");
  return v << shift;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"weft-bench: weft against NCCL, same run"};
  std::string minText = "16K", maxText = "256M";
  app.add_option("op", o.op, "allreduce, alltoall, empty, gemv_allreduce, embedding_alltoall or gemm_alltoall")
      ->check(
          CLI::IsMember({"allreduce", "alltoall", "empty", "gemv_allreduce", "embedding_alltoall", "gemm_alltoall"}));
  app.add_option("-b,--minbytes", minText, "Smallest size (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", maxText, "Largest size");
  app.add_option("-f,--stepfactor", o.factor, "Size multiplier")->check(CLI::Range(1.01, 1024.0));
  app.add_option("-n,--iters", o.iters, "Timed iterations per size")->check(CLI::Range(1, 100000));
  app.add_option("-w,--warmup", o.warmup, "Untimed iterations per size")->check(CLI::Range(0, 100000));
  app.add_option("-d,--dtype", o.dtype, "float, half or bf16")->check(CLI::IsMember({"float", "half", "bf16"}));
  app.add_option("-c,--check", o.check, "Check results against a float64 reference (1) or not (0)");
  app.add_flag("-G,--graph", o.graph, "Capture the -n iterations into one CUDA graph and time its replays");
  app.add_option("--json", o.json, "Also write the rows as JSON to this file (rank 0)");
  // Not --n: CLI11 2.4 takes it for -n (tests/tools/cli_option_names.cmake).
  app.add_option("--rows", o.gemvN, "gemv_allreduce: rows of w (outputs, y's width)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--k", o.gemvK, "gemv_allreduce: columns of w over all ranks (comma list)")->delimiter(',');
  app.add_option("--batch", o.gemvBatch, "gemv_allreduce: batch sizes, 1..64 (comma list)")->delimiter(',');
  app.add_flag("--cold-w", o.coldW,
               "gemv_allreduce: every op (weft's and the baseline's) reads w from a copy not in L2, as in decoding");
  std::vector<std::string> gemmShapes{"4096x2048x7168", "16384x2048x7168", "8192x14336x4096"};
  app.add_option("--shapes", gemmShapes, "gemm_alltoall: TOKENSxKxH per rank (comma list)")->delimiter(',');
  app.add_option("--baseline", o.baseline,
                 "The unfused baseline's collective: nccl, or weft (the fused ops: their compute, then weft's "
                 "AllReduce or All-to-All, for ranks that share a GPU, which NCCL refuses, or reach each other "
                 "through the host proxy; gemm_alltoall's splits are then even), or none (allreduce, alltoall: "
                 "weft alone; compare runs of one call)")
      ->check(CLI::IsMember({"nccl", "weft", "none"}));
  app.add_option("--forced-paths", o.forcedPaths,
                 "embedding_alltoall: also time each path forced, each on a communicator of its own (1), or the "
                 "table's choice alone (0: through the host proxy every communicator's proxy threads share the "
                 "CPUs, so time one path a run there, forced with WEFT_EMBEDDING_PATH)");
  CLI11_PARSE(app, argc, argv);
  if (o.baseline == "weft" && o.op != "embedding_alltoall" && o.op != "gemv_allreduce" && o.op != "gemm_alltoall")
    die("--baseline weft: only for the fused ops (gemv_allreduce, gemm_alltoall, embedding_alltoall)");
  if (o.baseline == "none" && o.op != "allreduce" && o.op != "alltoall")
    die("--baseline none: only for allreduce and alltoall");
  for (const std::string& s : gemmShapes) {
    GemmShape g{};
    if (std::sscanf(s.c_str(), "%ldx%ldx%ld", &g.tokens, &g.k, &g.h) != 3 || g.tokens < 0 || g.k < 0 || g.h < 0)
      die("--shapes: " + s + " is not TOKENSxKxH");
    o.gemmShapes.push_back(g);
  }
  o.minBytes = parseBytes(minText, "-b");
  o.maxBytes = parseBytes(maxText, "-e");
  if (o.minBytes > o.maxBytes) die("-b must not exceed -e");
  if (o.op == "gemv_allreduce") o.maxBytes = std::max<uint64_t>(o.maxBytes, uint64_t{64} * o.gemvN * 4);
  if (o.op == "embedding_alltoall") o.maxBytes = std::max<uint64_t>(o.maxBytes, uint64_t{256} << 20);
  if (o.op == "gemm_alltoall") o.maxBytes = std::max<uint64_t>(o.maxBytes, uint64_t{320} << 20);
  Context c = setUp(o);
  if (o.op == "gemv_allreduce") {
    reportGemv(c, o, runGemv(c, o));
  } else if (o.op == "gemm_alltoall") {
    reportGemm(c, o, runGemm(c, o));
  } else if (o.op == "embedding_alltoall") {
    reportEmbedding(c, o, runEmbedding(c, o));
  } else {
    std::vector<Row> rows = o.op == "empty" ? std::vector<Row>{runEmpty(c, o)} : runSizes(c, o);
    report(c, o, rows);
  }
  tearDown(c);
  return 0;
}
