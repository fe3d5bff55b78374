// weftctl tune measure's sweep: the shapes it times, the report the ranks send, and how measured
// points become rows of a path table.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/path_table.hpp"
#include "tune.hpp"

namespace weftctl {

struct GemvPoint {
  uint64_t batch = 0, n = 0, kLocal = 0;
};

// Every (k_local, n, batch) of the options, or of the backend's default sweep, sorted so; throws
// weft::Error naming the option with a size out of range.
std::vector<GemvPoint> gemvSweep(const TuneMeasureOptions& o, bool cpuBackend);

// Microseconds per op of each path, per point (by index into the sweep).
using PointTimes = std::vector<std::map<weft::OpPath, double>>;
// Rank 0's report ("PATH INDEX MICROSECONDS" lines); throws if a line is malformed or a point
// lacks a path.
PointTimes parseReport(const std::string& report, const std::vector<GemvPoint>& points);

struct PathRowsFor {
  int nranks = 0;
  PointTimes times;
};
// The fastest path of one point (ties go to the vendor BLAS, then the unfused path: the paths that
// cannot lose by construction).
weft::OpPath fastest(const std::map<weft::OpPath, double>& times);
// The table: a header saying where and how it was measured, then per world size and (k_local, n)
// the measured times as comments and one row per run of batches with the same fastest path (a
// row covers batches up to its last, n and k_local up to the measured ones).
std::string writeTable(const TuneMeasureOptions& o, const std::string& model, const std::string& measured,
                       const std::vector<GemvPoint>& points, const std::vector<PathRowsFor>& worlds);

bool commitOk(const std::string& commit);

}  // namespace weftctl
