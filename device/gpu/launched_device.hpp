// The frame of every launched op kernel (device/gpu/*_kernel.cu): an op's items assigned
// statically (block b takes items b, b + grid, ...), in increasing order so that every wait
// depends only on items the peers' blocks reach first. The grid must be co-resident (a few dozen
// blocks), as for any kernel whose blocks wait on each other's peers.
#pragma once

#include "../engine_device.hpp"

namespace weft::dev {

// What every launched op kernel does around its items: read the protocol counters, count the
// block in, run the block's items (run(coop, item, seq) -> Status), and let the last block to read
// the counters move them on. `tile` is the group's shared memory (at least kCoopFloats).
//
// WEFT_LAUNCHED_RUN: empty, or WEFT_INLINE where a kernel at its register limit must not call it
// (gpu/gemv_kernel.cu: nvcc on another host's libstdc++ made it a call there, which spills the
// kernel's state). Not forced for the others: forcing it changes what nvcc inlines into them.
#ifndef WEFT_LAUNCHED_RUN
#define WEFT_LAUNCHED_RUN
#endif
template <class Run>
__device__ WEFT_LAUNCHED_RUN inline void runLaunched(const CommView& view, const OpDesc& desc, float* tile, Run&& run) {
  __shared__ unsigned long long scratch;
  // The counters as read: only the leader uses them again, at the end, and kept here they hold no
  // registers of any thread while the items run (the GEMV kernel sits at its register limit).
  __shared__ OpCounters counters;
  const BlockCoop coop{&scratch, tile};
  // Each block reads the counters once, here: only the block that counts last below changes them,
  // after every block has read them, for the communicator's next op, which starts after this
  // kernel (in stream or graph order). The leader reads them with the first item's stop check, in
  // one round trip.
  struct Start {
    OpSeq seq;
    Status stop;
  };
  const Start start = coop.fromLeader<Start>([&] {
    counters = loadCounters(view.control);
    noteRunningOpMeet(counters.collectives);  // the block's, published by fromLeader's barrier
    return Start{opSeq(counters, desc), stopReason(view)};
  });
  // Each block counts itself in once it has read them, and the block that counts last stores
  // their next values when its items are done. The count is issued here, not after the items, so
  // that no block waits on its round trip at the end: the kernel's last block to finish used to pay
  // a barrier and an atomic's round trip before it could leave (docs/archive/perf-journal-2026-11.md).
  // Release orders this block's read of the counters before its count; acquire makes the other
  // blocks' reads, counted before this one, ordered before this block's stores at the end, should
  // it count last. Both are paid here, where the leader waits only for the counters it just read.
  // Every block counts, failed or not, so that the ranks' counters stay alike.
  uint32_t before = 0;
  if (coop.leader() && gridDim.x > 1)
    before = prim::atomicFetchAdd<prim::Order::kAcqRel, prim::Scope::kDevice>(&view.control->blocksDone, 1u);
  for (uint32_t item = blockIdx.x; item < desc.nitems; item += gridDim.x) {
    // After any failure of the communicator the remaining items give up at once; the wait that
    // failed recorded why in the queue header.
    const Status stop =
        item == blockIdx.x ? start.stop : coop.broadcast(coop.leader() ? stopReason(view) : Status::kOk);
    if (stop != Status::kOk) break;
    if (run(coop, item, start.seq) != Status::kOk) break;
    // An atomic nothing waits for, after the item's barrier-free end: the leader's count may run
    // ahead of the other threads' last stores, which is all a progress display needs.
    if (desc.countItems && coop.leader())
      (void)prim::atomicFetchAdd<prim::Order::kRelaxed, prim::Scope::kDevice>(&view.control->itemsFinished,
                                                                              uint64_t{1});
  }
  if (!coop.leader() || before + 1 != gridDim.x) return;
  if (gridDim.x > 1) {
    // Every block has counted (this one last): back to zero for the next op, with an atomic that
    // nothing waits for; every write to this word is one (docs/design-notes.md, "A count that
    // blocks add to is written only by atomics").
    (void)prim::atomicFetchAdd<prim::Order::kRelaxed, prim::Scope::kDevice>(&view.control->blocksDone, 0u - gridDim.x);
  }
  // The embedding's pooling kernel is no op of the queue's: it leaves the counters to the ops.
  if (desc.kind != static_cast<uint32_t>(OpKind::kEmbeddingPool))
    storeCounters(view.control, advance(counters, desc, static_cast<uint32_t>(view.nranks)));
}

}  // namespace weft::dev
