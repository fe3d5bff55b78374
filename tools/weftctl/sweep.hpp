// weftctl tune measure's sweep: the shapes it times, the report the ranks send, and how measured
// points become rows of a path table. One op per run (--op): the GEMV + AllReduce or the GEMM +
// All-to-All, each with every path it has forced in turn.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/path_table.hpp"
#include "tune.hpp"

namespace weftctl {

// One shape of the sweep: the op's three sizes in weft::shapeNames(op)'s order (GEMV: batch, n,
// k_local; GEMM: tokens, k, h), the first being the one whose runs of points make rows.
struct SweepPoint {
  uint64_t dims[3] = {0, 0, 0};
};

// The op --op names (gemv_allreduce or gemm_alltoall); throws weft::Error naming --op otherwise.
weft::FusedOp measuredOp(const TuneMeasureOptions& o);
// The paths a run of `op` times, each forced by its setting (pathSettingName).
const std::vector<weft::OpPath>& measuredPaths(weft::FusedOp op);
const char* pathSettingName(weft::FusedOp op);

// Every shape of the options, or of the backend's default sweep for the op, sorted by the last
// size, then the second, then the first; throws weft::Error naming an option with a size out of
// range or one the op does not take.
std::vector<SweepPoint> sweepOf(const TuneMeasureOptions& o, weft::FusedOp op, bool cpuBackend);

// Microseconds per op of each path, per point (by index into the sweep).
using PointTimes = std::vector<std::map<weft::OpPath, double>>;

// What one world size measured: the rows' ranks and per_gpu, and the times.
struct PathRowsFor {
  int nranks = 0;
  int perGpu = 1;  // the most ranks on one GPU, as the communicators saw it
  PointTimes times;
};
// Rank 0's report of a world of `nranks`: a "per_gpu N" line, then "PATH INDEX MICROSECONDS"
// lines; throws if a line is malformed, per_gpu is missing, or a point lacks one of the op's paths.
PathRowsFor parseReport(const std::string& report, weft::FusedOp op, const std::vector<SweepPoint>& points, int nranks);
// The fastest path of one point (ties go to the vendor BLAS, then the unfused path: the paths that
// cannot lose by construction).
weft::OpPath fastest(const std::map<weft::OpPath, double>& times);
// The table: a header saying where and how it was measured, then per world size and (second,
// third size) the measured times as comments and one row per run of first sizes with the same
// fastest path (a row covers first sizes up to its last, the other two up to the measured ones).
std::string writeTable(const TuneMeasureOptions& o, weft::FusedOp op, const std::string& model,
                       const std::string& measured, const std::vector<SweepPoint>& points,
                       const std::vector<PathRowsFor>& worlds);

bool commitOk(const std::string& commit);

}  // namespace weftctl
