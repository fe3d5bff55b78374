// The launched kernel of the GEMV ops (OpKind::kGemv and kGemvAllReduce), in a translation unit of
// its own (see op_kernel.cu): its streams, one per batch class and dtype, are most of the
// library's compile time (7 minutes of nvcc on two cores).
//
// The op bodies, the item function and the launched kernels' frame are inlined by force
// (WEFT_INLINE): left to nvcc's inliner, a build on a host with another libstdc++ made a call of
// the plain GEMV's body, and the kernel, at its 255 registers, then spilled three times the bytes
// (docs/perf.md, "GEMV + AllReduce"); with the bodies forced, it made a call of the frame.
#define WEFT_GEMV_RUN WEFT_INLINE
#define WEFT_LAUNCHED_RUN WEFT_INLINE
#include "kernels.hpp"
#include "launched_device.hpp"

namespace weft::dev::WEFT_KERNEL_VARIANT {

__global__ void WEFT_BLOCK_BOUNDS gemvKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc) {
#if defined(WEFT_HAVE_MMA)
  GemvAllReduceOp::warmFirstSlice(desc, blockIdx.x, threadIdx.x, blockDim.x);
#endif
  const bool fused = static_cast<OpKind>(desc.kind) == OpKind::kGemvAllReduce;
  __shared__ float tile[kCoopFloats];
  runLaunched(view, desc, tile, [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) WEFT_INLINE {
    return fused ? GemvAllReduceOp::run(c, view, desc, seq, item) : GemvOp::run(c, view, desc, seq, item);
  });
}

}  // namespace weft::dev::WEFT_KERNEL_VARIANT
