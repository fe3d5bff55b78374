// weft-bench: weft against the vendor baseline (NCCL) in the same run, nccl-tests style.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace weft::bench {

struct Options {
  std::string op = "allreduce";  // allreduce | alltoall | empty | gemv_allreduce | embedding_alltoall | gemm_alltoall
  uint64_t minBytes = 16 << 10;
  uint64_t maxBytes = 256 << 20;
  double factor = 2;
  int iters = 50;
  int warmup = 10;
  std::string dtype = "bf16";
  bool check = true;
  bool graph = false;
  std::string json;
  // gemv_allreduce shapes: rows of w, columns (split over the ranks), batch sizes.
  int64_t gemvN = 8192;
  std::vector<int64_t> gemvK{8192, 28672};
  std::vector<int64_t> gemvBatch{1, 8, 32};
  // gemv_allreduce: each op reads its own copy of w, from copies that together exceed L2 three
  // times, as a decode step's layers do (otherwise w stays in L2 from one op to the next where it fits).
  bool coldW = false;
  // gemm_alltoall shapes: rows per rank, k, h.
  std::vector<struct GemmShape> gemmShapes;
  // The unfused baseline's collective: NCCL's, or weft's own (the fused ops), for ranks that share
  // a GPU or reach each other through the host proxy, where NCCL does not run.
  std::string baseline = "nccl";
  // embedding_alltoall: also time each path forced, each on a communicator of its own.
  bool forcedPaths = true;
};

struct GemmShape {
  int64_t tokens, k, h;
};

struct Row {
  uint64_t bytes = 0;
  uint64_t count = 0;
  double weftUs = 0, ncclUs = 0;  // medians per op
  double weftHostUs = 0;          // host time to submit one weft op (mean over the timed loop)
  double weftBusBw = 0, ncclBusBw = 0;
  int64_t weftWrong = -1, ncclWrong = -1;  // -1: not checked
};

struct GemvRow {
  int64_t batch = 0, n = 0, k = 0;
  double weftUs = 0, baseUs = 0, gemvUs = 0, weftGemvUs = 0, allReduceUs = 0;  // medians per op
  double fusedUs = 0, rsagUs = 0, unfusedUs = 0, blasUs = 0;  // each path forced (weftUs: the table's choice)
  double hostUs = 0;                                          // host time per submission
  double wBytes = 0;                                          // bytes of w per rank
  int64_t diff = -1;                                          // elements off the baseline; -1: unchecked
};

struct GemmRow {
  int64_t tokens = 0, k = 0, h = 0;
  // Medians per op: weft as the path table runs it, each path forced, the baseline, cuBLAS's GEMM
  // alone, weft's own GEMM alone, the all-to-all alone.
  double weftUs = 0, fusedUs = 0, blasUs = 0, baseUs = 0, gemmUs = 0, weftGemmUs = 0, allToAllUs = 0;
  double hostUs = 0;  // host time per submission (the table's path)
  double flops() const { return 2.0 * tokens * k * h; }
  int64_t diff = -1;  // elements off the baseline; -1: unchecked
};

struct EmbedRow {
  int64_t tables = 0, rows = 0, dim = 0, batch = 0, pooling = 0;  // per rank; global batch
  double weftUs = 0, fusedUs = 0, unfusedUs = 0;                  // the table's choice; each path forced
  double baseUs = 0, poolUs = 0, allToAllUs = 0;                  // medians per op
  double hostUs = 0;                                              // host time per fused submission
  double poolGBs = 0, copyGBs = 0;  // rows gathered by pooling alone; device-to-device copy (read + write)
  int64_t diff = -1;                // elements off the baseline; -1: unchecked
};

// Everything one rank needs: the two communicators, a stream, buffers for the largest size.
struct Context {
  int rank = 0, nranks = 0;
  weft_comm_t weft = nullptr;
  ncclComm_t nccl = nullptr;
  cudaStream_t stream = nullptr;
  void* send = nullptr;      // ordinary device memory
  void* weftRecv = nullptr;  // symmetric heap
  void* ncclRecv = nullptr;
};

void die(const std::string& what);
Context setUp(const Options& o);
// A communicator of this rank alone (for timing weft's compute without the exchange) and a heap
// block of `bytes` in it.
struct Solo {
  weft_comm_t comm = nullptr;
  void* heap = nullptr;
  explicit Solo(size_t bytes);
  ~Solo();
  Solo(const Solo&) = delete;
  Solo& operator=(const Solo&) = delete;
};
// A second communicator of the same ranks whose fused op always takes one path (`setting`, the
// environment variable of gemv_path or gemm_path, set to `path`), and a heap block of `bytes` in
// it. Collective.
struct Peers {
  weft_comm_t comm = nullptr;
  void* heap = nullptr;
  Peers(Context& c, const char* setting, const char* path, size_t bytes);
  ~Peers();
  Peers(const Peers&) = delete;
  Peers& operator=(const Peers&) = delete;
};
void tearDown(Context& c);
std::vector<Row> runSizes(Context& c, const Options& o);
Row runEmpty(Context& c, const Options& o);
void report(const Context& c, const Options& o, const std::vector<Row>& rows);
std::vector<GemvRow> runGemv(Context& c, const Options& o);
void reportGemv(const Context& c, const Options& o, const std::vector<GemvRow>& rows);
std::vector<EmbedRow> runEmbedding(Context& c, const Options& o);
void reportEmbedding(const Context& c, const Options& o, const std::vector<EmbedRow>& rows);
std::vector<GemmRow> runGemm(Context& c, const Options& o);
void reportGemm(const Context& c, const Options& o, const std::vector<GemmRow>& rows);

}  // namespace weft::bench
