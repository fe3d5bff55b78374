// An op launched as an ordinary kernel on the caller's stream: the same items as the persistent
// engine runs, assigned statically (block b takes items b, b + grid, ...), in increasing order so
// that every wait depends only on items the peers' blocks reach first. The grid must be
// co-resident (a few dozen blocks), as for any kernel whose blocks wait on each other's peers.
#include "../engine_device.hpp"
#include "persistent_kernel.hpp"

namespace weft::dev {

__global__ void opKernel(CommView view, OpDesc desc, uint64_t ticket) {
  __shared__ unsigned long long scratch;
  BlockCoop coop{&scratch};
  for (uint32_t item = blockIdx.x; item < desc.nitems; item += gridDim.x) {
    // After any failure of the communicator the remaining items give up at once; the wait that
    // failed recorded why in the queue header.
    if (coop.broadcast(stopReason(view)) != Status::kOk) return;
    if (runItem(coop, view, desc, ticket, item) != Status::kOk) return;
  }
}

}  // namespace weft::dev
