// The launched kernels of the plain collectives, the one-shot AllReduce and the embedding op: an
// op launched as an ordinary kernel on the caller's stream, eagerly or captured into a graph, runs
// the same items as the persistent engine (launched_device.hpp). One kernel per op family, and the
// fused GEMV's and GEMM's in translation units of their own (gemv_kernel.cu, gemm_kernel.cu): a
// kernel's registers are those of its heaviest op, and the fused ops' code would otherwise cost
// the plain collectives theirs.
#include "kernels.hpp"
#include "launched_device.hpp"

namespace weft::dev::WEFT_KERNEL_VARIANT {

__global__ void WEFT_BLOCK_BOUNDS opKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc) {
  __shared__ float tile[kCoopFloats];
  runLaunched(view, desc, tile, [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) {
    return runCollectiveItem<BlockCoop, false>(c, view, desc, seq, item);
  });
}

// The one-shot AllReduce in 128-byte lines, a kernel of its own: a kernel's registers are those of
// its hungriest path, and this loop wants more than the 8-byte lines' (opKernel). With both in
// opKernel (127 registers) the 8-byte lines' small inputs were slower, and in a kernel of their
// own (70 registers) slower after a GEMV (docs/archive/perf-journal-2026-11.md).
__global__ void WEFT_BLOCK_BOUNDS oneShotLinesKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc) {
  __shared__ float tile[kCoopFloats];
  runLaunched(view, desc, tile, [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) {
    return AllReduceOneShotOp::runIn<true>(c, view, desc, seq, item);
  });
}

// Two blocks of 256 threads per SM: with 8 rows in flight per lane the pooling loop wants 168
// registers (one block per SM); capped at 128 (96 bytes of spills) it ran 3% faster than 6 rows in
// flight without spills (docs/archive/perf-journal-2026-11.md).
__global__ void __launch_bounds__(prim::kBlockThreads, 2)
    embeddingKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc) {
  __shared__ float tile[kCoopFloats];
  runLaunched(view, desc, tile, [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) {
    if (desc.kind == static_cast<uint32_t>(OpKind::kEmbeddingPool))
      return EmbeddingPoolOp::run(c, view, desc, seq, item);
    return EmbeddingAllToAllOp::run(c, view, desc, seq, item);
  });
}

}  // namespace weft::dev::WEFT_KERNEL_VARIANT
