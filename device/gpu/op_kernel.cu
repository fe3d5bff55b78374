// An op launched as an ordinary kernel on the caller's stream, eagerly or captured into a graph:
// the same items as the persistent engine runs, assigned statically (block b takes items b,
// b + grid, ...), in increasing order so that every wait depends only on items the peers' blocks
// reach first. The grid must be co-resident (a few dozen blocks), as for any kernel whose blocks
// wait on each other's peers.
#include "../engine_device.hpp"
#include "persistent_kernel.hpp"

namespace weft::dev {

__global__ void opKernel(CommView view, OpDesc desc) {
  __shared__ unsigned long long scratch;
  __shared__ float tile[kCoopFloats];
  BlockCoop coop{&scratch, tile};
  // Stable for the whole kernel: only the last block below changes them, after every block read.
  const OpCounters counters = loadCounters(view.control);
  const OpSeq seq = opSeq(counters, desc);
  for (uint32_t item = blockIdx.x; item < desc.nitems; item += gridDim.x) {
    // After any failure of the communicator the remaining items give up at once; the wait that
    // failed recorded why in the queue header.
    if (coop.broadcast(stopReason(view)) != Status::kOk) break;
    if (runItem(coop, view, desc, seq, item) != Status::kOk) break;
  }
  // The last block to leave moves the counters on for the communicator's next op, which starts
  // after this kernel (in stream or graph order). Every block counts, failed or not, so that the
  // ranks' counters stay alike.
  coop.sync();
  if (!coop.leader()) return;
  if (gridDim.x > 1) {
    const uint32_t before =
        gpu::atomicFetchAdd<gpu::Order::kAcqRel, gpu::Scope::kDevice>(&view.control->blocksDone, 1u);
    if (before + 1 != gridDim.x) return;
    gpu::atomicStore<gpu::Order::kRelaxed, gpu::Scope::kDevice>(&view.control->blocksDone, 0u);
  }
  storeCounters(view.control, advance(counters, desc, static_cast<uint32_t>(view.nranks)));
}

}  // namespace weft::dev
