#include "gemv_tuning.hpp"

#include <sstream>

#include "common/error.hpp"
#include "config.hpp"
#include "gemv_tuning_builtin.hpp"  // generated from conf/gemv_tuning.tsv

namespace weft {

namespace {

struct PathName {
  GemvPath path;
  const char* name;
};
constexpr PathName kPathNames[] = {{GemvPath::kFused, "fused"},
                                   {GemvPath::kFusedRsag, "fused_rsag"},
                                   {GemvPath::kUnfused, "unfused"},
                                   {GemvPath::kBlas, "blas"}};
constexpr const char* kPathList = "fused, fused_rsag, unfused or blas";

std::optional<GemvPath> pathNamed(const std::string& name) {
  for (const PathName& p : kPathNames)
    if (name == p.name) return p.path;
  return std::nullopt;
}

}  // namespace

const char* gemvPathName(GemvPath p) {
  for (const PathName& n : kPathNames)
    if (n.path == p) return n.name;
  return "?";
}

std::optional<GemvPath> gemvPathSetting(const std::string& value) {
  if (value == "auto") return std::nullopt;
  if (const auto p = pathNamed(value)) return p;
  throw Error(Code::kInvalidArgument, "gemv_path: '" + value + "' is not auto, " + kPathList);
}

namespace {

uint64_t field(const std::string& text, const std::string& where, const char* what) {
  if (text == "*") return UINT64_MAX;
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos, 10);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != text.size() || text.empty() || text[0] == '-' || v == 0)
    throw Error(Code::kInvalidArgument, where + ": " + what + " '" + text + "' is not a positive integer or '*'");
  return v;
}

}  // namespace

GemvTuning GemvTuning::parse(const std::string& text, const std::string& origin) {
  GemvTuning t;
  t.origin_ = origin;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    const std::string where = origin + ":" + std::to_string(number);
    if (w.size() != 5)
      throw Error(Code::kInvalidArgument,
                  where + ": expected 'ranks batch_max n_max k_max path', got " + std::to_string(w.size()) + " fields");
    GemvTuningRow r;
    r.line = number;
    const uint64_t ranks = field(w[0], where, "ranks");
    if (ranks != UINT64_MAX && ranks > 1 << 20)
      throw Error(Code::kInvalidArgument, where + ": ranks '" + w[0] + "' is too large");
    r.ranks = ranks == UINT64_MAX ? 0 : static_cast<int>(ranks);
    r.batchMax = field(w[1], where, "batch_max");
    r.nMax = field(w[2], where, "n_max");
    r.kMax = field(w[3], where, "k_max");
    const auto path = pathNamed(w[4]);
    if (!path) throw Error(Code::kInvalidArgument, where + ": path '" + w[4] + "' is not " + kPathList);
    r.path = *path;
    t.rows_.push_back(r);
  }
  return t;
}

GemvTuning GemvTuning::load(const std::string& file) {
  if (file.empty()) return parse(kGemvTuningBuiltin, "built-in conf/gemv_tuning.tsv");
  return parse(readTextFile(file, "gemv_tuning_file"), file);
}

const GemvTuningRow* GemvTuning::match(int nranks, uint64_t batch, uint64_t n, uint64_t kLocal) const {
  for (const GemvTuningRow& r : rows_)
    if ((r.ranks == 0 || r.ranks == nranks) && batch <= r.batchMax && n <= r.nMax && kLocal <= r.kMax) return &r;
  return nullptr;
}

GemvPath GemvTuning::choose(int nranks, uint64_t batch, uint64_t n, uint64_t kLocal) const {
  const GemvTuningRow* r = match(nranks, batch, n, kLocal);
  return r ? r->path : GemvPath::kFused;
}

uint64_t GemvTuning::fingerprint() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the rows' numbers
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  };
  for (const GemvTuningRow& r : rows_) {
    mix(static_cast<uint64_t>(r.ranks));
    mix(r.batchMax);
    mix(r.nMax);
    mix(r.kMax);
    mix(static_cast<uint64_t>(r.path));
  }
  return h;
}

}  // namespace weft
