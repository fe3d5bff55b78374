#include "sweep.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <tuple>

#include "common/error.hpp"

namespace weftctl {

namespace {

using weft::Code;
using weft::Error;
using weft::FusedOp;
using weft::OpPath;

// Preferred on ties: the paths that cannot lose by construction first.
constexpr OpPath kTieOrder[] = {OpPath::kBlas, OpPath::kUnfused, OpPath::kFused, OpPath::kFusedRsag};

void checkSizes(const std::vector<uint64_t>& v, const char* option, uint64_t most) {
  for (uint64_t x : v)
    if (x == 0 || x > most)
      throw Error(Code::kInvalidArgument,
                  std::string(option) + ": " + std::to_string(x) + " is not in [1, " + std::to_string(most) + "]");
}

void refuse(const std::vector<uint64_t>& v, const char* option, const char* ownOp) {
  if (!v.empty()) throw Error(Code::kInvalidArgument, std::string(option) + ": only for --op " + ownOp);
}

// The option's sizes, or the default sweep of this backend.
std::vector<uint64_t> sizesOr(const std::vector<uint64_t>& given, std::vector<uint64_t> cpu, std::vector<uint64_t> gpu,
                              bool cpuBackend) {
  return !given.empty() ? given : cpuBackend ? cpu : gpu;
}

}  // namespace

FusedOp measuredOp(const TuneMeasureOptions& o) {
  if (o.op == "gemv_allreduce") return FusedOp::kGemvAllReduce;
  if (o.op == "gemm_alltoall") return FusedOp::kGemmAllToAll;
  if (o.op == "embedding_alltoall") return FusedOp::kEmbeddingAllToAll;
  throw Error(Code::kInvalidArgument,
              "--op: '" + o.op + "' is not gemv_allreduce, gemm_alltoall or embedding_alltoall");
}

const std::vector<OpPath>& measuredPaths(FusedOp op) {
  static const std::vector<OpPath> gemv = {OpPath::kFused, OpPath::kFusedRsag, OpPath::kUnfused, OpPath::kBlas};
  static const std::vector<OpPath> gemm = {OpPath::kFused, OpPath::kBlas};
  static const std::vector<OpPath> embedding = {OpPath::kFused, OpPath::kUnfused};
  return op == FusedOp::kGemvAllReduce ? gemv : op == FusedOp::kGemmAllToAll ? gemm : embedding;
}

const char* pathSettingName(FusedOp op) {
  return op == FusedOp::kGemvAllReduce ? "gemv_path" : op == FusedOp::kGemmAllToAll ? "gemm_path" : "embedding_path";
}

std::vector<SweepPoint> sweepOf(const TuneMeasureOptions& o, FusedOp op, bool cpuBackend) {
  // The CPU backend computes with plain loops: its default sweeps are small enough for a test.
  std::vector<uint64_t> first, second, third;
  if (op != FusedOp::kEmbeddingAllToAll) {
    refuse(o.localBatch, "--local-batch", "embedding_alltoall");
    refuse(o.tables, "--tables", "embedding_alltoall");
    refuse(o.dim, "--dim", "embedding_alltoall");
  }
  if (op == FusedOp::kEmbeddingAllToAll) {
    const struct {
      const std::vector<uint64_t>* sizes;
      const char *option, *owner;
    } others[] = {{&o.batches, "--batch", "gemv_allreduce"},
                  {&o.n, "--n", "gemv_allreduce"},
                  {&o.k, "--k", "gemv_allreduce or gemm_alltoall"},
                  {&o.tokens, "--tokens", "gemm_alltoall"},
                  {&o.h, "--h", "gemm_alltoall"}};
    for (const auto& x : others) refuse(*x.sizes, x.option, x.owner);
    // DLRM's shapes: the issues' 8 tables of 128 and 16 of 256, over the batch sizes of inference
    // and training.
    first = sizesOr(o.localBatch, {4, 32}, {128, 256, 512, 1024, 2048, 4096, 8192}, cpuBackend);
    second = sizesOr(o.tables, {2}, {8, 16}, cpuBackend);
    third = sizesOr(o.dim, {16}, {128, 256}, cpuBackend);
    checkSizes(first, "--local-batch", 1u << 20);
    checkSizes(second, "--tables", 1024);
    checkSizes(third, "--dim", 1024);
    for (uint64_t x : third)
      if (x % 4 != 0)
        throw Error(Code::kInvalidArgument,
                    "--dim: " + std::to_string(x) + " is not a multiple of 4 (the embedding's)");
  } else if (op == FusedOp::kGemvAllReduce) {
    refuse(o.tokens, "--tokens", "gemm_alltoall");
    refuse(o.h, "--h", "gemm_alltoall");
    first = sizesOr(o.batches, {1, 8, 64}, {1, 2, 4, 8, 16, 32, 64}, cpuBackend);
    second = sizesOr(o.n, {256}, {8192}, cpuBackend);
    third = sizesOr(o.k, {64, 256}, {1024, 2048, 4096, 7168, 8192, 14336}, cpuBackend);
    checkSizes(first, "--batch", 64);
    checkSizes(second, "--n", 1u << 20);
    checkSizes(third, "--k", 1u << 20);
  } else {
    refuse(o.batches, "--batch", "gemv_allreduce");
    refuse(o.n, "--n", "gemv_allreduce");
    first = sizesOr(o.tokens, {8, 64}, {128, 256, 512, 1024, 2048, 4096, 8192}, cpuBackend);
    second = sizesOr(o.k, {32}, {2048, 14336}, cpuBackend);
    third = sizesOr(o.h, {64}, {4096, 7168}, cpuBackend);
    checkSizes(first, "--tokens", 1u << 20);
    checkSizes(second, "--k", 1u << 20);
    checkSizes(third, "--h", 1u << 20);
    for (const auto& [sizes, option] : {std::pair{&second, "--k"}, std::pair{&third, "--h"}})
      for (uint64_t x : *sizes)
        if (x % 8 != 0)
          throw Error(Code::kInvalidArgument,
                      std::string(option) + ": " + std::to_string(x) + " is not a multiple of 8 (the GEMM's k and h)");
  }
  std::vector<SweepPoint> points;
  for (uint64_t c : third)
    for (uint64_t b : second)
      for (uint64_t a : first) points.push_back(SweepPoint{{a, b, c}});
  auto key = [](const SweepPoint& p) { return std::tuple(p.dims[2], p.dims[1], p.dims[0]); };
  std::sort(points.begin(), points.end(), [&](const SweepPoint& a, const SweepPoint& b) { return key(a) < key(b); });
  points.erase(std::unique(points.begin(), points.end(),
                           [&](const SweepPoint& a, const SweepPoint& b) { return key(a) == key(b); }),
               points.end());
  return points;
}

PathRowsFor parseReport(const std::string& report, FusedOp op, const std::vector<SweepPoint>& points, int nranks) {
  const std::vector<OpPath>& paths = measuredPaths(op);
  PathRowsFor world{nranks, 0, PointTimes(points.size())};
  PointTimes& times = world.times;
  std::istringstream in(report);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string path;
    if (line.rfind("per_gpu ", 0) == 0) {
      int perGpu = 0;
      if (!(words >> path >> perGpu) || perGpu < 1 || perGpu > nranks || (world.perGpu && world.perGpu != perGpu))
        throw Error(Code::kInternal, "tune measure: rank 0 reported '" + line + "'");
      world.perGpu = perGpu;
      continue;
    }
    size_t index = 0;
    double us = 0;
    if (!(words >> path >> index >> us) || index >= points.size() || !(us > 0))
      throw Error(Code::kInternal, "tune measure: rank 0 reported '" + line + "'");
    bool known = false;
    for (OpPath p : paths)
      if (path == weft::pathName(p)) times[index][p] = us, known = true;
    if (!known) throw Error(Code::kInternal, "tune measure: rank 0 reported path '" + path + "'");
  }
  if (world.perGpu == 0) throw Error(Code::kInternal, "tune measure: rank 0 did not report its ranks per GPU");
  for (size_t i = 0; i < points.size(); ++i)
    if (times[i].size() != paths.size())
      throw Error(Code::kInternal, "tune measure: rank 0 reported " + std::to_string(times[i].size()) + " of the " +
                                       std::to_string(paths.size()) + " paths for point " + std::to_string(i));
  return world;
}

OpPath fastest(const std::map<OpPath, double>& times) {
  bool any = false;
  OpPath best = OpPath::kFused;
  for (OpPath p : kTieOrder) {
    const auto t = times.find(p);
    if (t == times.end()) continue;
    if (!any || t->second < times.at(best)) best = p;
    any = true;
  }
  return best;
}

std::string writeTable(const TuneMeasureOptions& o, FusedOp op, const std::string& model, const std::string& measured,
                       const std::vector<SweepPoint>& points, const std::vector<PathRowsFor>& worlds) {
  const char* const* names = weft::shapeNames(op);
  const std::vector<OpPath>& paths = measuredPaths(op);
  std::string pathNames;
  for (OpPath p : paths) pathNames += std::string(pathNames.empty() ? "" : " ") + weft::pathName(p);
  std::ostringstream out;
  out << "# weft path table measured by `weftctl tune measure --op " << weft::opName(op) << "` on " << model << ", "
      << o.dtype << ", " << o.samples << " samples of " << o.iters << " ops per path and shape (median).\n"
      << "# Rows cover " << names[0] << " up to theirs, " << names[1] << " and " << names[2]
      << " up to the measured ones; any other shape takes the\n"
      << "# fallback (runtime/path_table.hpp). Use it with path_table_file (WEFT_PATH_TABLE_FILE) on every rank;\n"
      << "# a table for several ops is these files one after the other.\n"
      << weft::tableHeader() << "\n";
  char buf[256];
  for (const PathRowsFor& w : worlds) {
    for (size_t i = 0; i < points.size();) {
      const uint64_t second = points[i].dims[1], third = points[i].dims[2];
      out << "# " << w.nranks << " rank(s), " << w.perGpu << " on a GPU, " << names[1] << " " << second << ", "
          << names[2] << " " << third << ": us per op (" << pathNames << ")\n";
      size_t end = i;
      while (end < points.size() && points[end].dims[1] == second && points[end].dims[2] == third) ++end;
      for (size_t j = i; j < end; ++j) {
        std::string line = "#   " + std::string(names[0]) + " ";
        std::snprintf(buf, sizeof buf, "%-3llu", static_cast<unsigned long long>(points[j].dims[0]));
        line += buf;
        for (OpPath p : paths) {
          std::snprintf(buf, sizeof buf, " %10.2f", w.times[j].at(p));
          line += buf;
        }
        out << line << "  -> " << weft::pathName(fastest(w.times[j])) << "\n";
      }
      for (size_t j = i; j < end; ++j) {
        const OpPath p = fastest(w.times[j]);
        if (j + 1 < end && fastest(w.times[j + 1]) == p) continue;  // the run goes on
        weft::PathRow r;
        r.op = op;
        r.gpu = model;
        r.ranks = w.nranks;
        r.perGpu = w.perGpu;
        r.maxima[0] = points[j].dims[0];
        r.maxima[1] = second;
        r.maxima[2] = third;
        r.path = p;
        r.measured = measured;
        out << weft::formatRow(r) << "\n";
      }
      i = end;
    }
  }
  return out.str();
}

bool commitOk(const std::string& commit) {
  return commit.size() >= 7 && commit.size() <= 40 &&
         commit.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
}

}  // namespace weftctl
