// The launched kernel of the GEMM + All-to-All, in a translation unit of its own (see op_kernel.cu).
#include "../ops/gemm/gemm_solo_device.hpp"
#include "kernels.hpp"
#include "launched_device.hpp"

namespace weft::dev {

// The image's word and its reader are the direct variant's (the proxied one has the same tile).
#if defined(WEFT_BACKEND_CUDA) && !defined(WEFT_PROXY_IN_DEVICE)
namespace {
// Each architecture's image says which tile it has (gemmKernelHasTmaTile; HIP has none to ask).
__device__ const int kImageHasTmaTile =
#if defined(WEFT_HAVE_TMA_TILE)
    1;
#else
    0;
#endif
}  // namespace
#endif

#if !defined(WEFT_PROXY_IN_DEVICE)
// Read on a stream of its own: a plain cudaMemcpyFromSymbol runs on the legacy stream, which
// would wait for the caller's blocking streams, and is refused while any thread captures a graph.
bool gemmKernelHasTmaTile() {
#if defined(WEFT_BACKEND_CUDA)
  int tma = 0;
  cudaStream_t s = nullptr;
  bool read = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess;
  read = read &&
         cudaMemcpyFromSymbolAsync(&tma, kImageHasTmaTile, sizeof tma, 0, cudaMemcpyDeviceToHost, s) == cudaSuccess;
  read = read && cudaStreamSynchronize(s) == cudaSuccess;
  if (s) (void)cudaStreamDestroy(s);
  if (!read) (void)cudaGetLastError();  // no image for this device: the launch will say so
  return read && tma == 1;
#else
  return false;
#endif
}
#endif

namespace WEFT_KERNEL_VARIANT {

static_assert(tile::kThreads == prim::kBlockThreads, "the GEMM's tile is a whole block's work");

// The GEMM + All-to-All: the group's memory is dynamic (gemmSharedBytes), the coop's scratch
// followed by the tile pipeline; one block per SM.
__global__ void __launch_bounds__(tile::kThreads, 1)
    gemmKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc, const WEFT_GRID_CONSTANT tile::GemmMaps maps) {
  extern __shared__ float4 dynamicShared[];
  float* group = reinterpret_cast<float*>(dynamicShared);
  // The route cache's tag and the uncounted rows: shared memory holds whatever the SM's last
  // kernel left. The copy engine's ring lives as long as the kernel.
  if (threadIdx.x == 0) GemmAllToAllOp::startGroup(RouteView{reinterpret_cast<int64_t*>(group), view.nranks});
#if defined(WEFT_HAVE_TMA_TILE)
  if (threadIdx.x == 0) tile::ringInit(tile::pipelineAt(group + kCoopFloats));
#endif
  runLaunched(view, desc, group, [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) {
    return GemmAllToAllOp::run(c, view, desc, seq, item, &maps);
  });
#if defined(WEFT_HAVE_TMA_TILE)
  if (threadIdx.x == 0) tile::ringDrain(tile::pipelineAt(group + kCoopFloats));
#endif
}

// The op given the vendor BLAS's product (the blas path): the same items with the multiply
// compiled out, in a kernel of its own. Run by gemmKernel, the copy paid for the multiply: one
// block per SM under the tile's 230 KB of shared memory, 255 registers with spills, and the
// multiply's code in the instruction cache's way; here 120 registers (130 proxied), no spills,
// 16 KB of shared memory, and the op's part of the blas path's time fell by a quarter
// (docs/perf.md, "GEMM + All-to-All").
__global__ void WEFT_BLOCK_BOUNDS gemmRouteKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc) {
  __shared__ float4 scratch[kCoopFloats / 4];  // int64 route words: 16-byte aligned
  float* group = reinterpret_cast<float*>(scratch);
  if (threadIdx.x == 0) GemmAllToAllOp::startGroup(RouteView{reinterpret_cast<int64_t*>(group), view.nranks});
  runLaunched(view, desc, group, [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) {
    return GemmAllToAllOp::run<BlockCoop, false>(c, view, desc, seq, item);
  });
}

// The same op on one rank (gemm_solo_device.hpp): a kernel of its own, so that its copy's
// registers are not the route's.
__global__ void WEFT_BLOCK_BOUNDS gemmSoloKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc) {
  // The group's memory, as runLaunched requires it (the op's start and the verdict pass through it).
  __shared__ float4 scratch[kCoopFloats / 4];
  runLaunched(view, desc, reinterpret_cast<float*>(scratch), [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) {
    return GemmSoloRoute::run(c, view, desc, seq, item);
  });
}

}  // namespace WEFT_KERNEL_VARIANT
}  // namespace weft::dev
