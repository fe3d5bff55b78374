// Every kernel of the GPU backend, declared for the host code that launches them (gpu_host.cu): the
// persistent engine (persistent_kernel.cu) and the launched op kernels, a translation unit per
// family (op_kernel.cu, gemv_kernel.cu, gemm_kernel.cu).
//
// Each kernel comes in two variants, a namespace each: `direct`, for communicators whose peers are
// all mapped, and `proxied`, whose device code also posts to the host proxy (proxy_device.hpp).
// A source is compiled once per variant (the *_proxied.cu files include it with
// WEFT_PROXY_IN_DEVICE defined), so the direct kernels keep the registers they had without the
// proxy. Each translation unit is a device module of its own (no separable compilation), and its
// host side holds only the kernels' launch stubs, so the two variants of the inline device code
// never meet.
#pragma once

#include "../comm_device.hpp"
#include "../ops/gemm/gemm_tma_device.hpp"

// The variant the including translation unit defines.
#if defined(WEFT_PROXY_IN_DEVICE)
#define WEFT_KERNEL_VARIANT proxied
#else
#define WEFT_KERNEL_VARIANT direct
#endif

// The kernels of one variant.
#define WEFT_DECLARE_KERNELS                                                                       \
  /* One launch per communicator (and again after an idle exit); grid = resident workers. */       \
  __global__ void persistentKernel(const WEFT_GRID_CONSTANT CommView view, uint64_t firstTicket);  \
  /* The launched kernels, one launch per op on the caller's stream (eager or captured into a */   \
  /* graph): the plain collectives and the one-shot AllReduce in 8-byte lines, */                  \
  __global__ void opKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc);                   \
  /* the one-shot AllReduce (OpKind::kAllReduceOneShot) in 128-byte lines, */                      \
  __global__ void oneShotLinesKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc);         \
  /* the GEMV ops (OpKind::kGemv, kGemvAllReduce), */                                              \
  __global__ void gemvKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc);                 \
  /* the embedding-bag + All-to-All, */                                                            \
  __global__ void embeddingKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc);            \
  /* the GEMM + All-to-All (one block per SM); `maps`: a's and w's tensor maps (the sm_90a tile */ \
  /* loads through them; unused elsewhere). */                                                     \
  __global__ void gemmKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc,                  \
                             const WEFT_GRID_CONSTANT tile::GemmMaps maps);                        \
  /* the same op given the vendor BLAS's product, which only routes its rows, */                   \
  __global__ void gemmRouteKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc);            \
  /* and that op on a communicator of one rank: a checked copy to itself. */                       \
  __global__ void gemmSoloKernel(const WEFT_GRID_CONSTANT CommView view, OpDesc desc);

namespace weft::dev {

namespace direct {
WEFT_DECLARE_KERNELS
}  // namespace direct
namespace proxied {
WEFT_DECLARE_KERNELS
}  // namespace proxied

// Host: whether the image of gemmKernel that the current device runs has the copy engine's tile
// (compiled for sm_90a; a plain sm_90 image has the cp.async one). The image says so itself: a
// word compiled into it, read once per device.
bool gemmKernelHasTmaTile();
// Dynamic shared memory of gemmKernel: the coop's scratch, then (CUDA) the tile pipeline: the
// copy engine's ring, its control words and the warps' output where the image has that tile
// (`tma`), the cp.async pipeline otherwise.
constexpr int gemmSharedBytes(bool tma) {
#if defined(WEFT_BACKEND_CUDA)
  return kCoopFloats * 4 + tile::kPipeAlign + (tma ? tile::kTmaSharedBytes : tile::kPipeBytes);
#else
  (void)tma;
  return kCoopFloats * 4;
#endif
}

}  // namespace weft::dev
