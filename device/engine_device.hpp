// The persistent engine: every resident worker (a thread block on a GPU, an OS thread on the CPU
// backend) runs this loop. Workers visit the ring in ticket order; on each op they take items by
// CAS on the slot's tagged claim word until none is left, then wait for the op to complete before
// moving on, so ops on one communicator run one after another, as stream order requires.
#pragma once

#include "comm_device.hpp"
#include "ops/allreduce_device.hpp"
#include "ops/allreduce_oneshot_device.hpp"
#include "ops/alltoall_device.hpp"

namespace weft::dev {

constexpr uint32_t kNoItem = 0xffffffffu;

enum class Poll : uint32_t { kReady, kGone, kStop };

// Only destroy stops the engine. After an abort it keeps completing ops, each at once and as
// aborted (every wait gives up), so that no stream ever waits for an op nobody will finish.
WEFT_HOST_DEVICE bool engineStopping(const QueueHeader* q) { return gpu::atomicLoad<gpu::Order::kRelaxed>(&q->stop); }

// Leader-only. Waits for `ticket` to be ready; kGone means other workers already completed it.
// Idle exit: a resident kernel would make every device-wide synchronisation of the caller's
// process (cudaDeviceSynchronize, cudaFree) wait forever, so a worker idle for idleNs leaves,
// unless a ticket is outstanding. The handshake with the submitter is Dekker's: the worker clears
// alive[w], fences, then reads `tail`; the submitter takes a ticket (raising `tail`), fences,
// then reads alive[]. At least one of them sees the other, so either a worker stays for the
// ticket or the submitter sees none alive and starts the engine again.
WEFT_HOST_DEVICE Poll pollReady(const CommView& v, const QueueSlot& s, uint64_t ticket, int worker) {
  uint64_t idleSince = gpu::nowNs();
  for (uint32_t spins = 0;; ++spins) {
    if (gpu::atomicLoad<gpu::Order::kAcquire>(&s.ready) == ticket + 1) return Poll::kReady;
    if (gpu::atomicLoad<gpu::Order::kAcquire>(&v.queue->completed) > ticket) return Poll::kGone;
    if (engineStopping(v.queue)) return Poll::kStop;
    gpu::relax(spins);
    if (v.idleNs == 0 || (spins & 63) != 63 || gpu::nowNs() - idleSince < v.idleNs) continue;
    gpu::atomicStore<gpu::Order::kRelease>(&v.alive[worker], 0u);
    gpu::fenceSeqCst();
    if (gpu::atomicLoad<gpu::Order::kAcquire>(&v.queue->tail) <= ticket) return Poll::kStop;
    gpu::atomicStore<gpu::Order::kRelease>(&v.alive[worker], 1u);
    idleSince = gpu::nowNs();
  }
}

// Leader-only. Touches only the two tagged words, never the descriptor: a worker that saw this op
// late may be looking at a slot that a submitter is refilling for the next op.
WEFT_HOST_DEVICE uint32_t claimItem(QueueSlot& s, uint64_t ticket) {
  const uint64_t tag = ticket & 0xffffffffu;
  const uint64_t limit = gpu::atomicLoad<gpu::Order::kAcquire>(&s.limit);
  if ((limit >> 32) != tag) return kNoItem;
  uint64_t cur = gpu::atomicLoad<gpu::Order::kAcquire>(&s.claim);
  for (;;) {
    if ((cur >> 32) != tag) return kNoItem;
    const uint32_t idx = static_cast<uint32_t>(cur);
    if (idx >= static_cast<uint32_t>(limit)) return kNoItem;
    if (gpu::atomicCas<gpu::Order::kAcqRel>(&s.claim, cur, cur + 1)) return idx;
  }
}

// Leader-only. The worker that finishes the last item publishes the op's completion.
WEFT_HOST_DEVICE void finishItem(const CommView& v, QueueSlot& s, uint64_t ticket, Status st) {
  if (st != Status::kOk) {
    uint32_t none = 0;
    gpu::atomicCas<gpu::Order::kRelaxed>(&s.status, none, static_cast<uint32_t>(st));
  }
  // Read while this worker still holds an item: once `finished` (or `done`) moves, the slot may
  // be reused.
  const uint64_t nitems = s.desc.nitems;
  const bool hostWaits = (s.flags & kSlotHostWaits) != 0;
  const uint64_t prev = gpu::atomicFetchAdd<gpu::Order::kAcqRel>(&s.finished, uint64_t{1});
  if (prev + 1 != nitems) return;
  gpu::atomicStore<gpu::Order::kRelease>(&s.done, ticket + 1);
  if (!hostWaits) gpu::atomicStore<gpu::Order::kRelease>(&s.free, ticket + 1);
  gpu::atomicStore<gpu::Order::kRelease>(&v.queue->completed, ticket + 1);
}

template <class Coop>
WEFT_HOST_DEVICE Status runItem(const Coop& c, const CommView& v, const OpDesc& d, uint64_t ticket, uint32_t item) {
  switch (static_cast<OpKind>(d.kind)) {
    case OpKind::kAllReduce:
      return AllReduceOp::run(c, v, d, ticket, item);
    case OpKind::kAllToAll:
      return AllToAllOp::run(c, v, d, ticket, item);
    case OpKind::kAllReduceOneShot:
      return AllReduceOneShotOp::run(c, v, d, ticket, item);
    default:
      return Status::kOk;
  }
}

template <class Coop>
WEFT_HOST_DEVICE void runWorker(const Coop& c, const CommView& v, uint64_t firstTicket, int worker) {
  for (uint64_t ticket = firstTicket;; ++ticket) {
    QueueSlot& s = v.slots[ticket % v.queue->depth];
    const Poll p = c.broadcast(c.leader() ? pollReady(v, s, ticket, worker) : Poll::kReady);
    if (p == Poll::kStop) return;
    if (p == Poll::kGone) continue;
    for (;;) {
      const uint32_t item = c.broadcast(c.leader() ? claimItem(s, ticket) : kNoItem);
      if (item == kNoItem) break;
      // Holding an item keeps the op from completing, so the slot's descriptor is stable here.
      Status st = stopReason(v);
      if (st == Status::kOk) st = runItem(c, v, s.desc, ticket, item);
      c.sync();
      if (c.leader()) finishItem(v, s, ticket, st);
    }
    // The op is complete once the workers holding its last items finish; their waits are bounded.
    if (c.leader())
      for (uint32_t spins = 0; gpu::atomicLoad<gpu::Order::kAcquire>(&v.queue->completed) <= ticket; ++spins) {
        if (engineStopping(v.queue)) break;
        gpu::relax(spins);
      }
    if (c.broadcast(engineStopping(v.queue))) return;
  }
}

}  // namespace weft::dev
