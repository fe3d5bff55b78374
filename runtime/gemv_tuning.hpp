// The GEMV + AllReduce's choice among the fused op's two ways to reduce and the unfused pairs
// (a GEMV writing y, weft's or the vendor BLAS's, then weft's AllReduce of y), per world size and
// shape. The table is text, one row per line:
//
//   ranks  batch_max  n_max  k_max  path      # '*' matches anything; k is k_local (per rank)
//
// The first row whose ranks equals the communicator's size (or '*') and whose maxima hold the
// shape decides; a shape no row covers runs fused. conf/gemv_tuning.tsv is the table weft-bench
// measured (built in); the gemv_tuning_file setting names another, and gemv_path forces a path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace weft {

// kFused: the fused op, every rank reducing every slice (one-shot); kFusedRsag: the fused op, each
// slice reduced by its owner and sent on (reduce-scatter + all-gather: fewer bytes, one more hop);
// kUnfused: weft's GEMV, then an AllReduce of y; kBlas: the vendor BLAS's GEMV (cuBLAS), then an
// AllReduce of y, where the engine has one (launched GPU engines of CUDA builds), else as kUnfused.
// (Numbered for the table's fingerprint.)
enum class GemvPath { kFused = 0, kUnfused = 1, kFusedRsag = 2, kBlas = 3 };

const char* gemvPathName(GemvPath p);
// The gemv_path setting: nullopt for "auto", else the forced path; throws weft::Error (invalid
// argument) naming gemv_path for anything else.
std::optional<GemvPath> gemvPathSetting(const std::string& value);

struct GemvTuningRow {
  int ranks = 0;  // 0: any
  uint64_t batchMax = UINT64_MAX, nMax = UINT64_MAX, kMax = UINT64_MAX;
  GemvPath path = GemvPath::kFused;
  int line = 0;  // in the table's text
};

class GemvTuning {
 public:
  // Parses `text` (from `origin`, a file name or "built-in"); throws weft::Error (invalid argument)
  // naming the origin and line of the first bad row.
  static GemvTuning parse(const std::string& text, const std::string& origin);
  // The file's table, or the built-in one (conf/gemv_tuning.tsv at build time) for "". The file
  // is read as readTextFile reads it (a regular file of at most 1 MiB).
  static GemvTuning load(const std::string& file);

  // The deciding row, or nullptr (then: fused).
  const GemvTuningRow* match(int nranks, uint64_t batch, uint64_t n, uint64_t kLocal) const;
  GemvPath choose(int nranks, uint64_t batch, uint64_t n, uint64_t kLocal) const;

  const std::vector<GemvTuningRow>& rows() const { return rows_; }
  const std::string& origin() const { return origin_; }
  // Of the rows, not the text: every rank must decide alike, so the ranks compare it at init.
  uint64_t fingerprint() const;

 private:
  std::vector<GemvTuningRow> rows_;
  std::string origin_;
};

}  // namespace weft
