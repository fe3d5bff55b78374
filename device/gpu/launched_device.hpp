// The frame of every launched op kernel (device/gpu/*_kernel.cu): an op's items assigned
// statically (block b takes items b, b + grid, ...), in increasing order so that every wait
// depends only on items the peers' blocks reach first. The grid must be co-resident (a few dozen
// blocks), as for any kernel whose blocks wait on each other's peers.
#pragma once

#include "../engine_device.hpp"

namespace weft::dev {

// What every launched op kernel does around its items: read the protocol counters, run the
// block's items (run(coop, item, seq) -> Status), and let the last block move the counters on.
// `tile` is the group's shared memory (at least kCoopFloats).
template <class Run>
__device__ inline void runLaunched(const CommView& view, const OpDesc& desc, float* tile, Run&& run) {
  __shared__ unsigned long long scratch;
  const BlockCoop coop{&scratch, tile};
  // The counters are stable for the whole kernel: only the last block below changes them, after
  // every block read them. The leader reads them with the first item's stop check, in one round trip.
  struct Start {
    OpCounters counters;
    Status stop;
  };
  const Start start = coop.fromLeader<Start>([&] { return Start{loadCounters(view.control), stopReason(view)}; });
  const OpSeq seq = opSeq(start.counters, desc);
  for (uint32_t item = blockIdx.x; item < desc.nitems; item += gridDim.x) {
    // After any failure of the communicator the remaining items give up at once; the wait that
    // failed recorded why in the queue header.
    const Status stop =
        item == blockIdx.x ? start.stop : coop.broadcast(coop.leader() ? stopReason(view) : Status::kOk);
    if (stop != Status::kOk) break;
    if (run(coop, item, seq) != Status::kOk) break;
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
  storeCounters(view.control, advance(start.counters, desc, static_cast<uint32_t>(view.nranks)));
}

}  // namespace weft::dev
