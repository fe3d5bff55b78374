// weftctl tune: `show` prints the path table in effect and, given an op and a shape, the path a
// communicator would take and why (the deciding row, a forcing setting, or the fallback);
// `measure` times every path of one fused op (the GEMV + AllReduce, the GEMM + All-to-All or the
// embedding-bag + All-to-All) on this machine, for each world size asked, and writes a table whose rows name the GPU
// model, the date and the commit. Each returns the process's exit status; bad arguments throw weft::Error naming the
// option.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weftctl {

struct TuneShowOptions {
  std::string op;     // empty: the table only
  int ranks = 0;      // with op
  int perGpu = 1;     // with op: the most ranks on one GPU
  std::string shape;  // with op: three sizes, comma-separated, in the op's order
  std::string gpu;    // empty: this machine's model (weft::gpuModel())
};
int runTuneShow(const TuneShowOptions& o);

struct TuneMeasureOptions {
  std::string op = "gemv_allreduce";  // or gemm_alltoall, embedding_alltoall
  std::vector<int> ranks;             // world sizes; ranks of one size share this host's devices
  // Each empty: the backend's default sweep.
  std::vector<uint64_t> batches;     // GEMV: batch
  std::vector<uint64_t> n;           // GEMV: rows of w
  std::vector<uint64_t> k;           // GEMV: columns of w on each rank (k_local); GEMM: k
  std::vector<uint64_t> tokens;      // GEMM: rows of a on each rank
  std::vector<uint64_t> h;           // GEMM: columns of w
  std::vector<uint64_t> localBatch;  // embedding: samples per rank
  std::vector<uint64_t> tables;      // embedding: tables per rank
  std::vector<uint64_t> dim;         // embedding: elements per vector
  std::string dtype = "bfloat16";    // float32 | float16 | bfloat16
  int iters = 0;                     // ops per timed sample (0: the backend's default)
  int samples = 5;                   // timed samples per path and shape; the median counts
  std::string out;                   // the table's file ("-": stdout)
  std::string commit;                // empty: the build's (common/build_info.hpp)
  double timeoutS = 600;             // bounds each world size's run
};
int runTuneMeasure(const TuneMeasureOptions& o);

}  // namespace weftctl
