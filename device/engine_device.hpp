// The persistent engine: every resident worker (a thread block on a GPU, an OS thread on the CPU
// backend) runs this loop. Workers visit the ring in ticket order; on each op they take items by
// CAS on the slot's tagged claim word until none is left, then wait for the op to complete before
// moving on, so ops on one communicator run one after another, as stream order requires.
#pragma once

#include "comm_device.hpp"
#include "ops/collectives/allreduce_device.hpp"
#include "ops/collectives/allreduce_oneshot_device.hpp"
#include "ops/collectives/alltoall_device.hpp"
#include "ops/embedding/embedding_alltoall_device.hpp"
#include "ops/gemm/gemm_alltoall_device.hpp"
#if defined(WEFT_BACKEND_CPU)
#include "ops/gemm/gemm_solo_device.hpp"
#endif
#include "ops/gemv/gemv_allreduce_device.hpp"

namespace weft::dev {

constexpr uint32_t kNoItem = 0xffffffffu;

enum class Poll : uint32_t { kReady, kGone, kStop };

// Whether `ticket` is complete: the device-memory mirror, and every kHostEvery-th poll the queue's
// own word in host memory (the host completes the slots of an engine that is going away).
constexpr uint32_t kHostEvery = 256;
WEFT_HOST_DEVICE bool hostTurn(const CommView& v, uint32_t spins) {
  return !v.control || spins % kHostEvery == kHostEvery - 1;
}
WEFT_HOST_DEVICE bool opCompleted(const CommView& v, uint64_t ticket, uint32_t spins) {
  if (v.control && prim::atomicLoad<prim::Order::kAcquire, prim::Scope::kDevice>(&v.control->completed) > ticket)
    return true;
  return hostTurn(v, spins) && prim::atomicLoad<prim::Order::kAcquire>(&v.queue->completed) > ticket;
}

// Only destroy stops the engine. After an abort it keeps completing ops, each at once and as
// aborted (every wait gives up), so that no stream ever waits for an op nobody will finish.
// Stopping: the heap's word, which the host raises with the queue's, and every kHostEvery-th poll
// the queue's.
WEFT_HOST_DEVICE bool engineStopping(const CommView& v, uint32_t spins) {
  if (v.control && prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(&v.control->stop)) return true;
  return hostTurn(v, spins) && prim::atomicLoad<prim::Order::kRelaxed>(&v.queue->stop);
}

// Leader-only. Waits for `ticket` to be ready; kGone means other workers already completed it.
// The queue lives in pinned host memory, and a GPU's reads of it cross PCIe: with every worker
// polling it, a resident engine of 128 blocks slowed every other kernel launch on its GPU from
// 8 us to 400 us (2 H100 under MPS, weftd's engine idle). So worker 0 alone polls the slot's
// `ready` word on each spin and mirrors what it saw into the heap's control words (device memory),
// which the others poll; they read the queue only every kHostEvery-th spin, in case worker 0 is
// not polling (it left on idle, or is still busy).
// Idle exit: a resident kernel would make every device-wide synchronisation of the caller's
// process (cudaDeviceSynchronize, cudaFree) wait forever, so a worker idle for idleNs leaves,
// unless a ticket is outstanding. The handshake with the submitter is Dekker's: the worker clears
// alive[w], fences, then reads `tail`; the submitter takes a ticket (raising `tail`), fences,
// then reads alive[]. At least one of them sees the other, so either a worker stays for the
// ticket or the submitter sees none alive and starts the engine again.
WEFT_HOST_DEVICE Poll pollReady(const CommView& v, const QueueSlot& s, uint64_t ticket, int worker) {
  uint64_t idleSince = prim::nowNs();
  const bool poller = worker == 0 || !v.control;
  for (uint32_t spins = 0;; ++spins) {
    if (poller || hostTurn(v, spins)) {
      if (prim::atomicLoad<prim::Order::kAcquire>(&s.ready) == ticket + 1) {
        // Whoever sees it publishes it (worker 0 may have left on idle while others stayed), the
        // op's item count first (claimItem). The mirror may go back (a late worker, a relaunched
        // kernel), never past the truth: every value stored was a ready ticket, and a worker at
        // a later ticket is not misled by an earlier one.
        if (v.control) {
          const uint64_t limit = prim::atomicLoad<prim::Order::kRelaxed>(&s.limit);
          prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(&v.control->opLimit, limit);
          prim::atomicStore<prim::Order::kRelease, prim::Scope::kDevice>(&v.control->readySeen, ticket + 1);
        }
        return Poll::kReady;
      }
    } else if (prim::atomicLoad<prim::Order::kAcquire, prim::Scope::kDevice>(&v.control->readySeen) > ticket) {
      return Poll::kReady;
    }
    if (opCompleted(v, ticket, spins)) return Poll::kGone;
    if (engineStopping(v, spins)) return Poll::kStop;
    prim::relax(spins);
    if (v.idleNs == 0 || (spins & 63) != 63 || prim::nowNs() - idleSince < v.idleNs) continue;
    prim::atomicStore<prim::Order::kRelease>(&v.alive[worker], 0u);
    prim::fenceSeqCst();
    if (prim::atomicLoad<prim::Order::kAcquire>(&v.queue->tail) <= ticket) return Poll::kStop;
    prim::atomicStore<prim::Order::kRelease>(&v.alive[worker], 1u);
    idleSince = prim::nowNs();
  }
}

// Leader-only. The next item of `ticket` for this worker, or kNoItem. The claims are counted in
// the engine's control block (device memory on a GPU): every worker claims once per item, and
// atomics on the queue, in pinned host memory, cross PCIe each time and queue up behind each
// other (docs/design-notes.md, "A worker reads host memory once per op"). The slot is read only
// for its tagged limit, never the descriptor: a worker that saw this op late may be looking at a
// slot that a submitter is refilling for the next op; the limit comes from the device mirror
// where worker 0 put it (pollReady), else from the slot. The slot's own claim word only shows the
// host that the op started.
WEFT_HOST_DEVICE uint32_t claimItem(const CommView& v, QueueSlot& s, uint64_t ticket) {
  const auto tag = static_cast<uint32_t>(ticket);
  uint64_t limit = prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(&v.control->opLimit);
  // (A mirror of no items is the control block's zeroes, not an op's.)
  if (static_cast<uint32_t>(limit >> 32) != tag || static_cast<uint32_t>(limit) == 0)
    limit = prim::atomicLoad<prim::Order::kAcquire>(&s.limit);
  const auto items = static_cast<uint32_t>(limit);
  if (static_cast<uint32_t>(limit >> 32) != tag || items == 0) return kNoItem;
  uint64_t* word = &v.control->claim;
  uint64_t cur = prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(word);
  for (;;) {
    // Ops run in ticket order, one at a time: the word holds this op's claims, or an earlier
    // op's (this op not yet started), or a later op's (this one long done: a late worker).
    const auto ahead = static_cast<int32_t>(static_cast<uint32_t>(cur >> 32) - tag);
    if (ahead > 0) return kNoItem;
    const uint32_t idx = ahead == 0 ? static_cast<uint32_t>(cur) : 0u;
    if (idx >= items) return kNoItem;
    if (prim::atomicCas<prim::Order::kRelaxed, prim::Scope::kDevice>(word, cur, (uint64_t{tag} << 32) | (idx + 1))) {
      prim::atomicStore<prim::Order::kRelaxed>(&s.claim, (uint64_t{tag} << 32) | (idx + 1));
      return idx;
    }
  }
}

WEFT_HOST_DEVICE OpCounters loadCounters(const EngineControl* c) {
  const OpCounters& k = c->counters;
  OpCounters out;
  out.ops = prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.ops);
  out.allReduceSeq = prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.allReduceSeq);
  out.allToAllSeq = prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.allToAllSeq);
  out.allToAllEpoch = prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.allToAllEpoch);
  out.oneShotEpoch = prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.oneShotEpoch);
  out.embedEpoch = prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.embedEpoch);
  out.embedItems = prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.embedItems);
  out.collectives = prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.collectives);
  return out;
}

// By an op's last worker, once every worker of the op has read them: the one that finishes the
// last item (finishItem, before it publishes the completion), or in a launched kernel the block
// that counts in last (gpu/launched_device.hpp).
WEFT_HOST_DEVICE void storeCounters(EngineControl* c, const OpCounters& v) {
  OpCounters& k = c->counters;
  prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.ops, v.ops);
  prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.allReduceSeq, v.allReduceSeq);
  prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.allToAllSeq, v.allToAllSeq);
  prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.allToAllEpoch, v.allToAllEpoch);
  prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.oneShotEpoch, v.oneShotEpoch);
  prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.embedEpoch, v.embedEpoch);
  prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.embedItems, v.embedItems);
  prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(&k.collectives, v.collectives);
}

// An op's protocol numbers, from the counters the ops before it left.
WEFT_HOST_DEVICE OpSeq opSeq(const OpCounters& k, const OpDesc& d) {
  switch (static_cast<OpKind>(d.kind)) {
    case OpKind::kAllReduce:
      return OpSeq{k.ops, k.allReduceSeq, 0};
    case OpKind::kAllToAll:
      if (!d.args.allToAll.staged) return OpSeq{k.ops, k.allToAllSeq, k.allToAllEpoch + 1};
      [[fallthrough]];  // staged: one of the flagged exchange's ops
    // The flagged exchange's ops: their lines' flag in place of a signal counter
    // (ops/flagged_exchange_device.hpp), with the op's signature folded in, but for the GEMM's
    // route, whose rows carry the signature (gemm_route_device.hpp).
    case OpKind::kAllReduceOneShot:
    case OpKind::kGemvAllReduce:
      return OpSeq{k.ops, exchangeFlag(k.oneShotEpoch + 1, d.sig), k.oneShotEpoch + 1};
    case OpKind::kGemmAllToAll:
      return OpSeq{k.ops, exchangeFlag(k.oneShotEpoch + 1, 0), k.oneShotEpoch + 1};
    case OpKind::kEmbeddingAllToAll:
      return OpSeq{k.ops, k.embedItems, k.embedEpoch + 1};
    case OpKind::kEmbeddingPool:  // the epoch of the embedding op it pools for, which follows it
      return OpSeq{k.ops, 0, k.embedEpoch + 1};
    default:
      return OpSeq{k.ops, 0, 0};
  }
}

// The counters after op `d`; the same on every rank, whatever the op's outcome. The embedding's
// pooling kernel is no op of the queue's (it has no ticket): it leaves them as they were.
WEFT_HOST_DEVICE OpCounters advance(OpCounters k, const OpDesc& d, uint32_t nranks) {
  if (d.kind == static_cast<uint32_t>(OpKind::kEmbeddingPool)) return k;
  ++k.ops;
  if (d.kind != static_cast<uint32_t>(OpKind::kNop) && d.kind != static_cast<uint32_t>(OpKind::kGemv)) ++k.collectives;
  switch (static_cast<OpKind>(d.kind)) {
    case OpKind::kAllReduce:
      k.allReduceSeq += AllReduceOp::seqAdvance(d.count, nranks, dtypeSize(static_cast<DType>(d.dtype)), d.grain);
      break;
    case OpKind::kAllToAll:
      if (!d.args.allToAll.staged) {
        k.allToAllSeq += AllToAllOp::seqAdvance(d.count, d.grain);
        ++k.allToAllEpoch;
        break;
      }
      [[fallthrough]];  // staged: the one-shot epoch, as opSeq
    case OpKind::kAllReduceOneShot:
    case OpKind::kGemvAllReduce:
    case OpKind::kGemmAllToAll:
      ++k.oneShotEpoch;
      break;
    case OpKind::kEmbeddingAllToAll:
      ++k.embedEpoch;
      k.embedItems += EmbeddingAllToAllOp::dataItems(d);
      break;
    default:
      break;
  }
  return k;
}

// The op's descriptor, from its slot (pinned host memory on a GPU) into `into` (the worker's own:
// block-shared memory on a GPU), by the whole group: the op's threads read its fields many times,
// and every read of host memory crosses PCIe. The slot's `flags` come with it.
template <class Coop>
WEFT_HOST_DEVICE void loadDescriptor(const Coop& c, const QueueSlot& s, OpDesc* into, uint32_t* flags) {
  constexpr int kWords = sizeof(OpDesc) / sizeof(uint64_t);
  static_assert(sizeof(OpDesc) % sizeof(uint64_t) == 0, "OpDesc is copied in 8-byte words");
  const auto* from = reinterpret_cast<const uint64_t*>(&s.desc);
  auto* to = reinterpret_cast<uint64_t*>(into);
  for (int i = c.rank(); i < kWords; i += c.size()) to[i] = from[i];
  if (c.leader()) *flags = s.flags;
  c.sync();
}

// Leader-only. The worker that finishes the last item stores `next` (the counters after this op)
// and publishes the op's completion. `nitems` and `flags`: the op's, read while this worker held
// its first item (once the op completes, the slot may be reused).
WEFT_HOST_DEVICE void finishItem(const CommView& v, QueueSlot& s, uint64_t ticket, Status st, const OpCounters& next,
                                 uint32_t nitems, uint32_t flags) {
  if (st != Status::kOk) {
    uint32_t none = 0;
    prim::atomicCas<prim::Order::kRelaxed>(&s.status, none, static_cast<uint32_t>(st));
  }
  const bool hostWaits = (flags & kSlotHostWaits) != 0;
  // The slot's count is for the host's eyes (items done); it is added before this worker's item
  // counts below, so that it lands before the op's completion can free the slot.
  prim::atomicFetchAdd<prim::Order::kRelaxed>(&s.finished, uint64_t{1});
  // The op's count, in the control block (see claimItem): the word holds this op's count or an
  // earlier op's. At system scope, so that the last worker's completion below is ordered after
  // every item's stores, wherever they went (peers' memory, the host's).
  const auto tag = static_cast<uint32_t>(ticket);
  uint64_t* word = &v.control->finished;
  uint64_t cur = prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(word);
  uint64_t prev;
  do {
    prev = static_cast<uint32_t>(cur >> 32) == tag ? static_cast<uint32_t>(cur) : 0u;
  } while (!prim::atomicCas<prim::Order::kAcqRel>(word, cur, (uint64_t{tag} << 32) | (prev + 1)));
  if (prev + 1 != nitems) return;
  storeCounters(v.control, next);
  prim::atomicStore<prim::Order::kRelease>(&s.done, ticket + 1);
  if (!hostWaits) prim::atomicStore<prim::Order::kRelease>(&s.free, ticket + 1);
  // The mirror first: a worker that reads the queue's word and runs the next op to its end must
  // find this store behind it, or the mirror could go back a ticket.
  if (v.control) prim::atomicStore<prim::Order::kRelease, prim::Scope::kDevice>(&v.control->completed, ticket + 1);
  prim::atomicStore<prim::Order::kRelease>(&v.queue->completed, ticket + 1);
}

// The plain collectives. A launched collective's kernel (gpu/op_kernel.cu) carries them with the
// one-shot AllReduce in 8-byte lines only (kLines false): its 128-byte lines have a kernel of
// their own there.
template <class Coop, bool kLines = true>
WEFT_HOST_DEVICE Status runCollectiveItem(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                          uint32_t item) {
  switch (static_cast<OpKind>(d.kind)) {
    case OpKind::kAllReduce:
      return AllReduceOp::run(c, v, d, seq, item);
    case OpKind::kAllToAll:
      return AllToAllOp::run(c, v, d, seq, item);
    case OpKind::kAllReduceOneShot:
      if constexpr (kLines) return AllReduceOneShotOp::run(c, v, d, seq, item);
      return AllReduceOneShotOp::runIn<false>(c, v, d, seq, item);
    case OpKind::kNop:  // a marker: its ticket orders a kernel of the caller's (Engine::enqueueAlone)
      return Status::kOk;
    default:  // a kind this engine does not run: the op fails rather than leave its output unwritten
      if (c.leader()) recordFailure(v, WaitSite{seq.op, item, -1, WaitWhat::kOpKind}, Status::kBadInput, 0, d.kind);
      return Status::kBadInput;
  }
}

// Every op: the persistent and CPU engines' workers serve them all.
template <class Coop>
WEFT_HOST_DEVICE Status runItem(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq, uint32_t item) {
  switch (static_cast<OpKind>(d.kind)) {
    case OpKind::kGemvAllReduce:
      return GemvAllReduceOp::run(c, v, d, seq, item);
    case OpKind::kGemv:
      return GemvOp::run(c, v, d, seq, item);
    case OpKind::kEmbeddingAllToAll:
      return EmbeddingAllToAllOp::run(c, v, d, seq, item);
#if defined(WEFT_BACKEND_CPU)
    // A GPU runs it only as its own kernel (gpu/gemm_kernel.cu): its tiles need more shared memory
    // than a persistent worker has.
    // Given the product on one rank: a checked copy to itself, as the GPU's route kernel runs it.
    case OpKind::kGemmAllToAll:
      if (v.nranks == 1 && GemmAllToAllOp::args(d).productGiven()) return GemmSoloRoute::run(c, v, d, seq, item);
      return GemmAllToAllOp::run(c, v, d, seq, item);
#endif
    default:
      return runCollectiveItem(c, v, d, seq, item);
  }
}

// `desc`: where this worker keeps the running op's descriptor (loadDescriptor).
template <class Coop>
WEFT_HOST_DEVICE void runWorker(const Coop& c, const CommView& v, uint64_t firstTicket, int worker, OpDesc* desc) {
  for (uint64_t ticket = firstTicket;; ++ticket) {
    QueueSlot& s = v.slots[ticket % v.queue->depth];
    const Poll p = c.broadcast(c.leader() ? pollReady(v, s, ticket, worker) : Poll::kReady);
    if (p == Poll::kStop) return;
    if (p == Poll::kGone) continue;
    OpSeq seq{};
    OpCounters next{};
    uint32_t flags = 0;
    for (bool first = true;; first = false) {
      const uint32_t item = c.broadcast(c.leader() ? claimItem(v, s, ticket) : kNoItem);
      if (item == kNoItem) break;
      // Holding an item keeps the op from completing, so the slot's descriptor and the counters
      // are stable here (this worker saw the previous op complete, after its counters moved):
      // read them once per op.
      if (first) {
        loadDescriptor(c, s, desc, &flags);
        const OpCounters now = c.template fromLeader<OpCounters>([&] { return loadCounters(v.control); });
        seq = opSeq(now, *desc);
        noteRunningOpMeet(now.collectives);  // every thread, the same value; read after the barriers below
        next = advance(now, *desc, static_cast<uint32_t>(v.nranks));
      }
      // One verdict for the whole group (threads that each read the flags could differ).
      Status st = c.broadcast(c.leader() ? stopReason(v) : Status::kOk);
      if (st == Status::kOk) st = runItem(c, v, *desc, seq, item);
      c.sync();
      if (c.leader()) finishItem(v, s, ticket, st, next, desc->nitems, flags);
    }
    // The op is complete once the workers holding its last items finish; their waits are bounded.
    if (c.leader())
      for (uint32_t spins = 0; !opCompleted(v, ticket, spins); ++spins) {
        if (engineStopping(v, spins)) break;
        prim::relax(spins);
      }
    // The control block's stop word after every op; the queue's (host memory) after every
    // kHostEvery-th, so that workers between ops do not all read across PCIe.
    if (c.broadcast(c.leader() && engineStopping(v, static_cast<uint32_t>(ticket)))) return;
  }
}

}  // namespace weft::dev
