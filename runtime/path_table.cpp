#include "path_table.hpp"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <sstream>

#include "common/error.hpp"
#include "config.hpp"
#include "path_table_builtin.hpp"  // generated from conf/path_table.tsv

namespace weft {

namespace {

struct OpInfo {
  FusedOp op;
  const char* name;
  const char* shape[3];
  std::vector<OpPath> paths;  // the first is the fallback
};

const std::vector<OpInfo>& ops() {
  static const std::vector<OpInfo> kOps = {
      {FusedOp::kGemvAllReduce,
       "gemv_allreduce",
       {"batch", "n", "k_local"},
       {OpPath::kBlas, OpPath::kUnfused, OpPath::kFused, OpPath::kFusedRsag}},
      {FusedOp::kGemmAllToAll, "gemm_alltoall", {"tokens", "k", "h"}, {OpPath::kFused, OpPath::kBlas}},
      {FusedOp::kEmbeddingAllToAll,
       "embedding_alltoall",
       {"local_batch", "num_tables", "dim"},
       {OpPath::kFused, OpPath::kUnfused}},
  };
  return kOps;
}

const OpInfo& infoOf(FusedOp op) { return ops()[static_cast<size_t>(op)]; }

constexpr const char* kPathNames[] = {"fused", "unfused", "fused_rsag", "blas"};  // by OpPath's value

std::optional<OpPath> pathNamed(const std::string& name) {
  for (size_t i = 0; i < std::size(kPathNames); ++i)
    if (name == kPathNames[i]) return static_cast<OpPath>(i);
  return std::nullopt;
}

std::string opList() {
  std::string out;
  for (size_t i = 0; i < ops().size(); ++i)
    out += std::string(i ? (i + 1 == ops().size() ? " or " : ", ") : "") + ops()[i].name;
  return out;
}

// A positive integer or '*' (UINT64_MAX).
uint64_t limitField(const std::string& text, const std::string& where, const std::string& what) {
  if (text == "*") return UINT64_MAX;
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos, 10);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != text.size() || text.empty() || text[0] == '-' || text[0] == '+' || v == 0)
    throw Error(Code::kInvalidArgument, where + ": " + what + " '" + text + "' is not a positive integer or '*'");
  return v;
}

// How a table's header comment starts, whichever format it declares.
constexpr const char* kHeaderStart = "# op gpu ranks ";

// A count of ranks (ranks, per_gpu): a positive integer to 2^20, or '*' (0: any).
int countField(const std::string& text, const std::string& where, const std::string& what) {
  const uint64_t v = limitField(text, where, what);
  if (v == UINT64_MAX) return 0;
  if (v > 1 << 20) throw Error(Code::kInvalidArgument, where + ": " + what + " '" + text + "' is too large");
  return static_cast<int>(v);
}

// DATE@COMMIT: a date as YYYY-MM-DD and 7 to 40 hex digits.
bool provenanceOk(const std::string& m) {
  const size_t at = m.find('@');
  if (at != 10 || m.size() < 18 || m.size() > 51) return false;
  for (size_t i = 0; i < 10; ++i)
    if (i == 4 || i == 7 ? m[i] != '-' : !std::isdigit(static_cast<unsigned char>(m[i]))) return false;
  for (size_t i = at + 1; i < m.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(m[i]))) return false;
  return true;
}

std::string limitText(uint64_t v) { return v == UINT64_MAX ? "*" : std::to_string(v); }

}  // namespace

const char* opName(FusedOp op) { return infoOf(op).name; }

std::optional<FusedOp> opNamed(const std::string& name) {
  for (const OpInfo& i : ops())
    if (name == i.name) return i.op;
  return std::nullopt;
}

const char* pathName(OpPath p) {
  const auto i = static_cast<size_t>(p);
  return i < std::size(kPathNames) ? kPathNames[i] : "?";
}

std::string pathList(FusedOp op) {
  const std::vector<OpPath>& paths = infoOf(op).paths;
  std::string out;
  for (size_t i = 0; i < paths.size(); ++i)
    out += std::string(i ? (i + 1 == paths.size() ? " or " : ", ") : "") + pathName(paths[i]);
  return out;
}

bool opHasPath(FusedOp op, OpPath p) {
  for (OpPath q : infoOf(op).paths)
    if (q == p) return true;
  return false;
}

OpPath fallbackPath(FusedOp op) { return infoOf(op).paths.front(); }

const char* const* shapeNames(FusedOp op) { return infoOf(op).shape; }

std::optional<OpPath> pathSetting(FusedOp op, const std::string& value, const char* setting) {
  if (value == "auto") return std::nullopt;
  if (const auto p = pathNamed(value); p && opHasPath(op, *p)) return p;
  throw Error(Code::kInvalidArgument,
              std::string(setting) + ": '" + value + "' is not auto, " + pathList(op) + " (" + opName(op) + ")");
}

PathTable PathTable::parse(const std::string& text, const std::string& origin) {
  PathTable t;
  t.origin_ = origin;
  std::istringstream in(text);
  std::string line;
  // A header comment ("# op gpu ranks ...", as tableHeader() writes) declares the format of the rows
  // after it, so that a row of the new format missing a field is not read as an old one, shifted.
  size_t declared = 0;  // 0: either
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.rfind(kHeaderStart, 0) == 0) declared = line.find(" per_gpu ") != std::string::npos ? 9 : 8;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    const std::string where = origin + ":" + std::to_string(number);
    if ((w.size() != 8 && w.size() != 9) || (declared && w.size() != declared))
      throw Error(Code::kInvalidArgument,
                  where + ": expected " + (declared == 8 ? "8 fields (the header above has no per_gpu)" : "9 fields") +
                      " (" + tableHeader().substr(2) + (declared ? "" : "; 8 without per_gpu") + "), got " +
                      std::to_string(w.size()));
    if (w.size() == 8) w.insert(w.begin() + 3, "*");  // written before per_gpu: any
    PathRow r;
    r.line = number;
    const auto op = opNamed(w[0]);
    if (!op) throw Error(Code::kInvalidArgument, where + ": op '" + w[0] + "' is not " + opList());
    r.op = *op;
    r.gpu = w[1] == "*" ? "" : w[1];
    r.ranks = countField(w[2], where, "ranks");
    r.perGpu = countField(w[3], where, "per_gpu");
    for (int d = 0; d < 3; ++d) r.maxima[d] = limitField(w[4 + d], where, std::string(shapeNames(r.op)[d]) + "_max");
    const auto path = pathNamed(w[7]);
    if (!path || !opHasPath(r.op, *path))
      throw Error(Code::kInvalidArgument,
                  where + ": path '" + w[7] + "' is not " + pathList(r.op) + " (the paths " + w[0] + " has)");
    r.path = *path;
    if (w[8] != "-" && !provenanceOk(w[8]))
      throw Error(Code::kInvalidArgument,
                  where + ": measured '" + w[8] + "' is not DATE@COMMIT (2026-11-22@ab36614) or '-'");
    r.measured = w[8] == "-" ? "" : w[8];
    t.rows_.push_back(r);
  }
  return t;
}

PathTable PathTable::load(const std::string& file) {
  if (file.empty()) return parse(kPathTableBuiltin, "built-in conf/path_table.tsv");
  return parse(readTextFile(file, "path_table_file"), file);
}

PathChoice PathTable::choose(FusedOp op, const Placement& where, const OpShape& shape) const {
  for (const PathRow& r : rows_) {
    if (r.op != op || (!r.gpu.empty() && r.gpu != where.gpu) || (r.ranks != 0 && r.ranks != where.nranks) ||
        (r.perGpu != 0 && r.perGpu != where.perGpu))
      continue;
    if (shape.dims[0] <= r.maxima[0] && shape.dims[1] <= r.maxima[1] && shape.dims[2] <= r.maxima[2])
      return PathChoice{r.path, &r};
  }
  return PathChoice{fallbackPath(op), nullptr};
}

uint64_t PathTable::fingerprint() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over what decides
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  };
  for (const PathRow& r : rows_) {
    mix(static_cast<uint64_t>(r.op));
    for (char c : r.gpu) mix(static_cast<unsigned char>(c));
    mix(r.gpu.size());
    mix(static_cast<uint64_t>(r.ranks));
    mix(static_cast<uint64_t>(r.perGpu));
    for (uint64_t m : r.maxima) mix(m);
    mix(static_cast<uint64_t>(r.path));
  }
  return h;
}

std::string formatRow(const PathRow& r) {
  auto padded = [](std::string text, size_t width) {
    text.resize(std::max(text.size() + 1, width), ' ');
    return text;
  };
  return padded(opName(r.op), 19) + padded(r.gpu.empty() ? "*" : r.gpu, 25) +
         padded(r.ranks ? std::to_string(r.ranks) : "*", 6) + padded(r.perGpu ? std::to_string(r.perGpu) : "*", 8) +
         padded(limitText(r.maxima[0]), 11) + padded(limitText(r.maxima[1]), 11) + padded(limitText(r.maxima[2]), 11) +
         padded(pathName(r.path), 11) + (r.measured.empty() ? "-" : r.measured);
}

std::string tableHeader() { return std::string(kHeaderStart) + "per_gpu max1 max2 max3 path measured"; }

}  // namespace weft
