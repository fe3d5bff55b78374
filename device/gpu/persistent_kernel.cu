// The persistent kernel: each resident thread block is one engine worker. One source for CUDA
// and HIP (the HIP build compiles this file as HIP). The host side that maps the heap into the
// GPU and launches this kernel on the communicator's stream arrives with the GPU backend.
#include "../engine_device.hpp"
#include "persistent_kernel.hpp"

namespace weft::dev {

__global__ void persistentKernel(CommView view, uint64_t firstTicket) {
  __shared__ unsigned long long scratch;
  BlockCoop coop{&scratch};
  runWorker(coop, view, firstTicket);
}

}  // namespace weft::dev
