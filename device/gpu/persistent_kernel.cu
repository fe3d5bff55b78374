// The persistent kernel: each resident thread block is one engine worker. One source for CUDA
// and HIP (the HIP build compiles this file as HIP). runtime/backend_gpu.cpp launches it on the
// communicator's own stream, and again whenever it has exited for idleness.
#include "../engine_device.hpp"
#include "kernels.hpp"

namespace weft::dev::WEFT_KERNEL_VARIANT {

__global__ void WEFT_BLOCK_BOUNDS persistentKernel(const WEFT_GRID_CONSTANT CommView view, uint64_t firstTicket) {
  __shared__ unsigned long long scratch;
  __shared__ float tile[kCoopFloats];
  __shared__ OpDesc desc;
  BlockCoop coop{&scratch, tile};
  runWorker(coop, view, firstTicket, static_cast<int>(blockIdx.x), &desc);
}

}  // namespace weft::dev::WEFT_KERNEL_VARIANT
