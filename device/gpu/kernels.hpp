// Every kernel of the GPU backend, declared for the host code that launches them (gpu_host.cu): the
// persistent engine (persistent_kernel.cu) and the launched op kernels, a translation unit per
// family (op_kernel.cu, gemv_kernel.cu, gemm_kernel.cu).
#pragma once

#include "../comm_device.hpp"
#include "../ops/gemm_tma_device.hpp"

namespace weft::dev {

// One launch per communicator (and again after an idle exit); grid = resident workers.
__global__ void persistentKernel(CommView view, uint64_t firstTicket);
// The launched kernels, one launch per op on the caller's stream (eager or captured into a
// graph). The plain collectives and the one-shot AllReduce in 8-byte lines:
__global__ void opKernel(CommView view, OpDesc desc);
// The one-shot AllReduce (OpKind::kAllReduceOneShot) in 128-byte lines:
__global__ void oneShotLinesKernel(CommView view, OpDesc desc);
// The GEMV ops (OpKind::kGemv, kGemvAllReduce):
__global__ void gemvKernel(CommView view, OpDesc desc);
// The embedding-bag + All-to-All:
__global__ void embeddingKernel(CommView view, OpDesc desc);
// The GEMM + All-to-All (one block per SM). `maps`: a's and w's tensor maps (the sm_90a tile
// loads through them; unused elsewhere).
__global__ void gemmKernel(CommView view, OpDesc desc, const WEFT_GRID_CONSTANT tile::GemmMaps maps);
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
