// weftctl tune show: the path table in effect, and what a shape would run and why.
#include <cstdio>
#include <optional>
#include <sstream>

#include "common/error.hpp"
#include "runtime/backend.hpp"
#include "runtime/config.hpp"
#include "runtime/path_table.hpp"
#include "sweep.hpp"
#include "tune.hpp"

namespace weftctl {

namespace {

using weft::Code;
using weft::Error;

// "8,8192,2048": three whole numbers in [1, 2^63), the first of a GEMV at most 64 (its batch).
weft::OpShape parseShape(weft::FusedOp op, const std::string& text) {
  const char* const* names = weft::shapeNames(op);
  const std::string expected = std::string(names[0]) + "," + names[1] + "," + names[2];
  weft::OpShape shape;
  std::istringstream in(text);
  std::string part;
  int d = 0;
  for (; std::getline(in, part, ','); ++d) {
    const bool digits = !part.empty() && part.size() <= 19 && part.find_first_not_of("0123456789") == std::string::npos;
    if (d >= 3 || !digits || std::stoull(part) == 0 || std::stoull(part) > static_cast<uint64_t>(INT64_MAX))
      throw Error(Code::kInvalidArgument, "--shape: '" + text + "' is not three positive whole numbers " + expected +
                                              " for " + weft::opName(op));
    shape.dims[d] = std::stoull(part);
  }
  if (d != 3 || text.back() == ',')
    throw Error(Code::kInvalidArgument,
                "--shape: '" + text + "' is not three positive whole numbers " + expected + " for " + weft::opName(op));
  if (op == weft::FusedOp::kGemvAllReduce && shape.dims[0] > 64)
    throw Error(Code::kInvalidArgument, "--shape: batch " + std::to_string(shape.dims[0]) +
                                            " is past the GEMV + AllReduce's 64 (weft_gemv_allreduce)");
  return shape;
}

// Why a shape takes the fallback, per op.
const char* fallbackReason(weft::FusedOp op) {
  switch (op) {
    case weft::FusedOp::kGemvAllReduce:
      return "the vendor BLAS's GEMV, then weft's AllReduce: the baseline's own compute, so it cannot lose; weft's "
             "GEMV where the engine has no vendor BLAS";
    case weft::FusedOp::kGemmAllToAll:
      return "the fused op (the blas path pays the routing op's fixed cost, so it is no safe default)";
    default:
      return "the fused op (unfused, the vectors cross the device's memory twice: pooled, then copied out)";
  }
}

}  // namespace

int runTuneShow(const TuneShowOptions& o) {
  const weft::Settings s = weft::Settings::resolve();
  const weft::PathTable t = weft::PathTable::load(s.getString("path_table_file"));
  const std::string gpu = o.gpu.empty() ? weft::gpuModel() : o.gpu;
  // The question is checked before anything is printed: a malformed one gets its error alone.
  std::optional<weft::FusedOp> op;
  weft::OpShape shape;
  if (!o.op.empty()) {
    op = weft::opNamed(o.op);
    if (!op)
      throw Error(Code::kInvalidArgument,
                  "--op: '" + o.op + "' is not gemv_allreduce, gemm_alltoall or embedding_alltoall");
    if (o.ranks <= 0 || o.shape.empty()) throw Error(Code::kInvalidArgument, "--op: needs --ranks and --shape");
    if (o.perGpu < 1 || o.perGpu > o.ranks)
      throw Error(Code::kInvalidArgument,
                  "--per-gpu: " + std::to_string(o.perGpu) + " is not 1 to --ranks (" + std::to_string(o.ranks) + ")");
    shape = parseShape(*op, o.shape);
  }
  std::printf("table: %s (%zu rows)\n", t.origin().c_str(), t.rows().size());
  std::printf("gpu model: %s%s\n", gpu.empty() ? "(none found)" : gpu.c_str(),
              o.gpu.empty() ? " (this machine's; --gpu asks for another)" : " (--gpu)");
  std::printf("  %-5s %s\n", "line", weft::tableHeader().substr(2).c_str());
  for (const weft::PathRow& r : t.rows()) std::printf("  %-5d %s\n", r.line, weft::formatRow(r).c_str());
  if (!op) return 0;
  const char* const* names = weft::shapeNames(*op);
  std::printf("%s on %d rank(s) of %s (%d on a GPU), %s %llu, %s %llu, %s %llu: ", weft::opName(*op), o.ranks,
              gpu.empty() ? "no GPU" : gpu.c_str(), o.perGpu, names[0], static_cast<unsigned long long>(shape.dims[0]),
              names[1], static_cast<unsigned long long>(shape.dims[1]), names[2],
              static_cast<unsigned long long>(shape.dims[2]));
  const char* setting = pathSettingName(*op);
  if (const auto forced = weft::pathSetting(*op, s.getString(setting), setting)) {
    std::printf("%s (%s forces it)\n", weft::pathName(*forced), setting);
    return 0;
  }
  const weft::PathChoice c = t.choose(*op, weft::Placement{gpu, o.ranks, o.perGpu}, shape);
  if (c.row)
    std::printf("%s (line %d: %s)\n", weft::pathName(c.path), c.row->line, weft::formatRow(*c.row).c_str());
  else
    std::printf("%s (no row covers it: the fallback, %s)\n", weft::pathName(c.path), fallbackReason(*op));
  if (*op == weft::FusedOp::kGemvAllReduce && o.ranks > 1)
    std::printf("note: ranks that reach a peer through the host proxy take blas unless gemv_path says otherwise\n");
  if (*op == weft::FusedOp::kEmbeddingAllToAll && o.ranks > 1)
    std::printf(
        "note: ranks that reach a peer through the host proxy take fused unless embedding_path says otherwise\n");
  return 0;
}

}  // namespace weftctl
