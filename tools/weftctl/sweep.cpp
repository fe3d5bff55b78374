#include "sweep.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "common/error.hpp"

namespace weftctl {

namespace {

using weft::Code;
using weft::Error;
using weft::OpPath;

// Preferred on ties: the paths that cannot lose by construction first.
constexpr OpPath kTieOrder[] = {OpPath::kBlas, OpPath::kUnfused, OpPath::kFused, OpPath::kFusedRsag};

void checkSizes(const std::vector<uint64_t>& v, const char* option, uint64_t most) {
  for (uint64_t x : v)
    if (x == 0 || x > most)
      throw Error(Code::kInvalidArgument,
                  std::string(option) + ": " + std::to_string(x) + " is not in [1, " + std::to_string(most) + "]");
}

}  // namespace

std::vector<GemvPoint> gemvSweep(const TuneMeasureOptions& o, bool cpuBackend) {
  // The CPU backend computes with plain loops: its default sweep is small enough for a test.
  const std::vector<uint64_t> batches = !o.batches.empty() ? o.batches
                                        : cpuBackend       ? std::vector<uint64_t>{1, 8, 64}
                                                           : std::vector<uint64_t>{1, 2, 4, 8, 16, 32, 64};
  const std::vector<uint64_t> ns = !o.n.empty() ? o.n
                                   : cpuBackend ? std::vector<uint64_t>{256}
                                                : std::vector<uint64_t>{8192};
  const std::vector<uint64_t> ks = !o.kLocal.empty() ? o.kLocal
                                   : cpuBackend      ? std::vector<uint64_t>{64, 256}
                                                     : std::vector<uint64_t>{1024, 2048, 4096, 7168, 8192, 14336};
  checkSizes(batches, "--batch", 64);
  checkSizes(ns, "--n", 1u << 20);
  checkSizes(ks, "--k", 1u << 20);
  std::vector<GemvPoint> points;
  for (uint64_t k : ks)
    for (uint64_t n : ns)
      for (uint64_t b : batches) points.push_back(GemvPoint{b, n, k});
  std::sort(points.begin(), points.end(), [](const GemvPoint& a, const GemvPoint& b) {
    return a.kLocal != b.kLocal ? a.kLocal < b.kLocal : a.n != b.n ? a.n < b.n : a.batch < b.batch;
  });
  points.erase(std::unique(points.begin(), points.end(),
                           [](const GemvPoint& a, const GemvPoint& b) {
                             return a.batch == b.batch && a.n == b.n && a.kLocal == b.kLocal;
                           }),
               points.end());
  return points;
}

PointTimes parseReport(const std::string& report, const std::vector<GemvPoint>& points) {
  PointTimes times(points.size());
  std::istringstream in(report);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string path;
    size_t index = 0;
    double us = 0;
    if (!(words >> path >> index >> us) || index >= points.size() || !(us > 0))
      throw Error(Code::kInternal, "tune measure: rank 0 reported '" + line + "'");
    bool known = false;
    for (OpPath p : kTieOrder)
      if (path == weft::pathName(p)) times[index][p] = us, known = true;
    if (!known) throw Error(Code::kInternal, "tune measure: rank 0 reported path '" + path + "'");
  }
  for (size_t i = 0; i < points.size(); ++i)
    if (times[i].size() != std::size(kTieOrder))
      throw Error(Code::kInternal, "tune measure: rank 0 reported " + std::to_string(times[i].size()) +
                                       " of the 4 paths for point " + std::to_string(i));
  return times;
}

OpPath fastest(const std::map<OpPath, double>& times) {
  OpPath best = kTieOrder[0];
  for (OpPath p : kTieOrder)
    if (times.at(p) < times.at(best)) best = p;
  return best;
}

std::string writeTable(const TuneMeasureOptions& o, const std::string& model, const std::string& measured,
                       const std::vector<GemvPoint>& points, const std::vector<PathRowsFor>& worlds) {
  std::ostringstream out;
  out << "# weft path table measured by `weftctl tune measure` on " << model << ", " << o.dtype << ", " << o.samples
      << " samples of " << o.iters << " ops per path and shape (median).\n"
      << "# Rows cover batch up to theirs, n and k_local up to the measured ones; any other shape takes the\n"
      << "# fallback (runtime/path_table.hpp). Use it with path_table_file (WEFT_PATH_TABLE_FILE) on every rank.\n"
      << "# The GEMM and embedding ops have one path each (fused): nothing to choose, so no rows.\n"
      << weft::tableHeader() << "\n";
  char buf[256];
  for (const PathRowsFor& w : worlds) {
    for (size_t i = 0; i < points.size();) {
      const uint64_t n = points[i].n, k = points[i].kLocal;
      out << "# " << w.nranks << " rank(s), n " << n << ", k_local " << k
          << ": us per op (fused fused_rsag unfused blas)\n";
      size_t end = i;
      while (end < points.size() && points[end].n == n && points[end].kLocal == k) ++end;
      for (size_t j = i; j < end; ++j) {
        const auto& t = w.times[j];
        std::snprintf(buf, sizeof buf, "#   batch %-3llu %10.2f %10.2f %10.2f %10.2f  -> %s\n",
                      static_cast<unsigned long long>(points[j].batch), t.at(OpPath::kFused), t.at(OpPath::kFusedRsag),
                      t.at(OpPath::kUnfused), t.at(OpPath::kBlas), weft::pathName(fastest(t)));
        out << buf;
      }
      for (size_t j = i; j < end; ++j) {
        const OpPath p = fastest(w.times[j]);
        if (j + 1 < end && fastest(w.times[j + 1]) == p) continue;  // the run goes on
        weft::PathRow r;
        r.op = weft::FusedOp::kGemvAllReduce;
        r.gpu = model;
        r.ranks = w.nranks;
        r.maxima[0] = points[j].batch;
        r.maxima[1] = n;
        r.maxima[2] = k;
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
