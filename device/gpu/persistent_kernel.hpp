#pragma once

#include "../comm_device.hpp"
#include "../ops/gemm_tile_device.hpp"

namespace weft::dev {

// One launch per communicator (and again after an idle exit); grid = resident workers.
__global__ void persistentKernel(CommView view, uint64_t firstTicket);
// One launch per op, on the caller's stream (eager or captured into a graph): the plain
// collectives, the GEMV ops (OpKind::kGemv, kGemvAllReduce) and the embedding op.
__global__ void opKernel(CommView view, OpDesc desc);
__global__ void gemvKernel(CommView view, OpDesc desc);
__global__ void embeddingKernel(CommView view, OpDesc desc);
__global__ void gemmKernel(CommView view, OpDesc desc);
// Dynamic shared memory of gemmKernel: the coop's scratch, then (CUDA) the tile pipeline.
constexpr int gemmSharedBytes() {
#if defined(WEFT_BACKEND_CUDA)
  return kCoopFloats * 4 + tile::kPipeAlign + tile::kPipeBytes;
#else
  return kCoopFloats * 4;
#endif
}

}  // namespace weft::dev
