// Which way each fused op runs, per GPU model, world size and shape: one table for the three ops.
// The table is text, one row per line (conf/path_table.tsv is the built-in one):
//
//   op  gpu  ranks  per_gpu  max1  max2  max3  path  measured
//
// op: gemv_allreduce (maxima: batch, n, k_local), gemm_alltoall (tokens, k, h) or
// embedding_alltoall (local_batch, num_tables, dim). gpu: the model as the runtime names it
// (gpuModel(): the device's name with blanks as '_', "cpu" on the CPU backend) or '*'; ranks: the
// communicator's size or '*'; per_gpu: the most of its ranks that share one GPU (1: each rank has
// a GPU of its own) or '*'; a maximum is a positive integer or '*'. measured: DATE@COMMIT of the
// run that chose the path (weftctl tune measure), or '-' for a row written by hand. A row of 8
// fields (the format before per_gpu) has per_gpu '*'. A header comment (tableHeader()) declares
// the rows after it: with per_gpu, only rows of 9 fields; without it (an older table's), 8.
// The first row whose op, gpu, ranks and per_gpu match and whose maxima hold the shape decides. A
// shape no row covers takes the op's fallback (fallbackPath).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace weft {

enum class FusedOp { kGemvAllReduce = 0, kGemmAllToAll = 1, kEmbeddingAllToAll = 2 };

// Numbered for the table's fingerprint. GEMV + AllReduce: kFused (every rank reduces every slice),
// kFusedRsag (each slice's owner reduces it and sends it on), kUnfused (weft's GEMV, then weft's
// AllReduce), kBlas (the vendor BLAS's GEMV, then weft's AllReduce; as kUnfused where the engine
// has no vendor BLAS). GEMM + All-to-All: kFused, or kBlas (the vendor BLAS's GEMM, then the op
// routes its rows as it routes the tiles it computes; as kFused where the engine has no vendor
// BLAS). The GEMM's fallback stays kFused: its kBlas pays the routing op's fixed cost, so unlike
// the GEMV's it can lose (measured: from about 512 tokens). The embedding op has kFused only.
enum class OpPath { kFused = 0, kUnfused = 1, kFusedRsag = 2, kBlas = 3 };

const char* opName(FusedOp op);
std::optional<FusedOp> opNamed(const std::string& name);
const char* pathName(OpPath p);
// The paths `op` can run, as text for messages ("fused, fused_rsag, unfused or blas").
std::string pathList(FusedOp op);
bool opHasPath(FusedOp op, OpPath p);
// What a shape no row covers runs: for the GEMV, the vendor BLAS's GEMV then weft's AllReduce
// (the baseline's own compute and a collective at least as fast: it cannot lose by construction);
// for the GEMM and the embedding, the fused op.
OpPath fallbackPath(FusedOp op);
// The names of the three maxima of `op`'s rows, in order ("batch", "n", "k_local").
const char* const* shapeNames(FusedOp op);
// A forced path setting (gemv_path): nullopt for "auto"; throws weft::Error (invalid argument)
// naming `setting` for a path `op` cannot run.
std::optional<OpPath> pathSetting(FusedOp op, const std::string& value, const char* setting);

struct OpShape {
  uint64_t dims[3] = {0, 0, 0};  // in shapeNames(op)'s order
};

// What a row's keys are matched against: the same on every rank of a communicator (its rank 0's
// GPU model; the most ranks on any one GPU), so that every rank decides alike.
struct Placement {
  std::string gpu;  // gpuModel()
  int nranks = 1;
  int perGpu = 1;  // the most ranks of the communicator on one GPU
};

struct PathRow {
  FusedOp op = FusedOp::kGemvAllReduce;
  std::string gpu;  // "" for any
  int ranks = 0;    // 0 for any
  int perGpu = 0;   // 0 for any
  uint64_t maxima[3] = {UINT64_MAX, UINT64_MAX, UINT64_MAX};
  OpPath path = OpPath::kFused;
  std::string measured;  // DATE@COMMIT, or "" (written by hand)
  int line = 0;          // in the table's text
};

// Why a path: the deciding row (null: no row covers the shape, so the fallback).
struct PathChoice {
  OpPath path;
  const PathRow* row;
};

class PathTable {
 public:
  // Parses `text` (from `origin`, a file name or "built-in ..."); throws weft::Error (invalid
  // argument) naming the origin, line and field of the first bad row.
  static PathTable parse(const std::string& text, const std::string& origin);
  // The file's table (read as readTextFile reads the path_table_file setting), or the built-in one
  // for "".
  static PathTable load(const std::string& file);

  PathChoice choose(FusedOp op, const Placement& where, const OpShape& shape) const;

  const std::vector<PathRow>& rows() const { return rows_; }
  const std::string& origin() const { return origin_; }
  // Of the rows that decide (not the comments or provenance): every rank must decide alike, so
  // the ranks compare it at init.
  uint64_t fingerprint() const;

 private:
  std::vector<PathRow> rows_;
  std::string origin_;
};

// One row as the table's text writes it (weftctl tune measure), without a line break.
std::string formatRow(const PathRow& r);
// The header comment of a table file: its column names.
std::string tableHeader();

}  // namespace weft
