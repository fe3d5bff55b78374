#include "work_queue.hpp"

#include "common/error.hpp"
#include "device/comm_device.hpp"
#include "device/sleep_slack.hpp"
#include "runtime/signature.hpp"

namespace weft {

using dev::Status;

namespace {

// The caller's thread waits for its op by polling, and from prim::kRelaxSleepsFrom polls on
// prim::relax sleeps 20 us at a time (the CPU backend's workers share few cores). Linux stretches a timed wait by
// the thread's timer slack, 50 us by default: an op that completed during one was seen up to
// 70 us late, which through the host proxy was most of a small op's time on 32 cores. While its
// wait sleeps the thread's slack is 1 us; the thread is the caller's, so it gets its own back.
class PreciseSleeps {
 public:
  PreciseSleeps() = default;
  PreciseSleeps(const PreciseSleeps&) = delete;
  PreciseSleeps& operator=(const PreciseSleeps&) = delete;
  ~PreciseSleeps() { dev::restoreSleepSlack(saved_); }
  void engage() {
    if (saved_ == 0) saved_ = dev::usePreciseSleeps();
  }

 private:
  long saved_ = 0;  // the caller's slack once engaged (-1: unknown, left alone)
};

}  // namespace

size_t WorkQueue::bytesFor(uint32_t depth) {
  return sizeof(dev::QueueHeader) + sizeof(dev::QueueSlot) * depth + sizeof(uint32_t) * (kMaxWorkers + 1);
}

WorkQueue::WorkQueue(uint32_t depth)
    : WorkQueue(depth, [depth] {
        auto shm = transport::ShmSegment::create(transport::ShmSegment::uniqueName("queue"), bytesFor(depth));
        // Nobody else attaches: in service mode weftd makes the segment and passes its descriptor.
        shm.unlink();
        return shm;
      }()) {}

WorkQueue::WorkQueue(uint32_t depth, transport::ShmSegment memory) : shm_(std::move(memory)) {
  if (shm_.size() < bytesFor(depth)) throw Error(Code::kInternal, "work queue: segment too small for its depth");
  header_ = static_cast<dev::QueueHeader*>(shm_.data());
  slots_ = reinterpret_cast<dev::QueueSlot*>(header_ + 1);
  header_->depth = depth;
  *one() = 1;
  prim::atomicStore<prim::Order::kRelease>(&header_->magic, dev::kQueueMagic);
}

uint64_t WorkQueue::reserve() { return prim::atomicFetchAdd<prim::Order::kRelaxed>(&header_->tail, uint64_t{1}); }

Status WorkQueue::publish(uint64_t ticket, const dev::OpDesc& desc, bool hostWaits, uint64_t timeoutNs) {
  dev::QueueSlot& s = slots_[ticket % depth()];
  const uint64_t needFree = ticket >= depth() ? ticket + 1 - depth() : 0;
  dev::CommView v;
  v.queue = header_;
  v.timeoutNs = timeoutNs;
  Status st = dev::pollAtLeast(v, &s.free, needFree, dev::WaitSite{ticket, 0, -1, dev::WaitWhat::kQueueSlot});
  if (st != Status::kOk) return st;
  s.desc = desc;
  s.status = 0;
  s.flags = hostWaits ? dev::kSlotHostWaits : 0;
  prim::atomicStore<prim::Order::kRelaxed>(&s.finished, uint64_t{0});
  const uint64_t tag = (ticket & 0xffffffffu) << 32;
  prim::atomicStore<prim::Order::kRelaxed>(&s.limit, tag | desc.nitems);
  prim::atomicStore<prim::Order::kRelaxed>(&s.claim, tag);
  // `done` and `ready` only ever grow: a stream still waiting on this slot's previous op (done >=
  // t + 1 - depth) stays satisfied, whatever happens to the slot now.
  return Status::kOk;
}

void WorkQueue::markReady(uint64_t ticket) {
  prim::atomicStore<prim::Order::kRelease>(&slots_[ticket % depth()].ready, ticket + 1);
}

void WorkQueue::completeUnfinished() {
  const uint64_t tail = prim::atomicLoad<prim::Order::kAcquire>(&header_->tail);
  for (uint64_t t = prim::atomicLoad<prim::Order::kAcquire>(&header_->completed); t < tail; ++t) {
    dev::QueueSlot& s = slots_[t % depth()];
    if (prim::atomicLoad<prim::Order::kAcquire>(&s.done) == t + 1) continue;
    prim::atomicStore<prim::Order::kRelaxed>(&s.status, static_cast<uint32_t>(Status::kAborted));
    prim::atomicStore<prim::Order::kRelease>(&s.done, t + 1);
    prim::atomicStore<prim::Order::kRelease>(&s.free, t + 1);
  }
  prim::atomicStore<prim::Order::kRelease>(&header_->completed, tail);
}

void WorkQueue::completeAborted() {
  prim::fenceSeqCst();
  completeUnfinished();
}

void WorkQueue::completeIfAborted() {
  prim::fenceSeqCst();
  if (prim::atomicLoad<prim::Order::kAcquire>(&header_->abort) != 0) completeUnfinished();
}

uint64_t WorkQueue::inFlight() const {
  return prim::atomicLoad<prim::Order::kAcquire>(&header_->tail) -
         prim::atomicLoad<prim::Order::kAcquire>(&header_->completed);
}

Status WorkQueue::wait(uint64_t ticket, uint64_t stallNs, uint64_t abortGraceNs) {
  dev::QueueSlot& s = slots_[ticket % depth()];
  uint64_t progress = ~uint64_t{0};
  uint64_t lastMove = prim::nowNs();
  uint64_t abortSeen = 0;
  PreciseSleeps precise;
  for (uint32_t spins = 0;; ++spins) {
    if (prim::atomicLoad<prim::Order::kAcquire>(&s.done) == ticket + 1) {
      const auto st = static_cast<Status>(prim::atomicLoad<prim::Order::kRelaxed>(&s.status));
      prim::atomicStore<prim::Order::kRelease>(&s.free, ticket + 1);
      return st;
    }
    if (spins == prim::kRelaxSleepsFrom) precise.engage();
    prim::relax(spins);
    if ((spins & 15) != 0) continue;
    const uint64_t now = prim::nowNs();
    if (prim::atomicLoad<prim::Order::kRelaxed>(&header_->abort)) {
      if (!abortSeen) abortSeen = now;
      if (now - abortSeen > abortGraceNs) return Status::kAborted;
      continue;
    }
    const uint64_t p = prim::atomicLoad<prim::Order::kRelaxed>(&s.finished) +
                       prim::atomicLoad<prim::Order::kRelaxed>(&header_->completed);
    if (p != progress) {
      progress = p;
      lastMove = now;
      if (progress_) noteProgress(ticket, now);
    } else if (now - lastMove > stallNs) {
      recordHostFailure(ticket, Status::kTimeout, ticket + 1, prim::atomicLoad<prim::Order::kRelaxed>(&s.done));
      return Status::kTimeout;
    }
  }
}

void WorkQueue::noteProgress(uint64_t ticket, uint64_t now) {
  SlotProgress& p = progress_[ticket % depth()];
  const dev::QueueSlot& s = slots_[ticket % depth()];
  prim::atomicStore<prim::Order::kRelaxed>(&p.itemsDone, prim::atomicLoad<prim::Order::kRelaxed>(&s.finished));
  // Ops run one after another: this one starts once every earlier one has completed.
  if (prim::atomicLoad<prim::Order::kRelaxed>(&p.startNs) == 0 &&
      prim::atomicLoad<prim::Order::kRelaxed>(&header_->completed) >= ticket)
    prim::atomicStore<prim::Order::kRelaxed>(&p.startNs, now);
}

void WorkQueue::failPeerGone(int peer, int pid, uint64_t seenBy) {
  dev::recordHostFailure(*header_, dev::WaitSite{0, 0, peer, dev::WaitWhat::kPeerGone}, Status::kTransport, seenBy,
                         static_cast<uint64_t>(pid));
  // Without weftd there is no engine to finish the ops: submits must stop too. A rank's engine
  // lives on, and its caller raises the engine's own error word.
  if (peer < 0) prim::atomicStore<prim::Order::kRelease>(&header_->abort, 1u);
}

void WorkQueue::recordHostFailure(uint64_t ticket, Status st, uint64_t expected, uint64_t observed,
                                  dev::WaitWhat what) {
  dev::recordHostFailure(*header_, dev::WaitSite{ticket, 0, -1, what}, st, expected, observed);
}

const char* waitWhatName(dev::WaitWhat w) {
  switch (w) {
    case dev::WaitWhat::kInboxData:
      return "inbox tile (data signal)";
    case dev::WaitWhat::kInboxCredit:
      return "inbox slot credit";
    case dev::WaitWhat::kGather:
      return "all-gather tiles";
    case dev::WaitWhat::kReady:
      return "ready-to-receive signal";
    case dev::WaitWhat::kArrival:
      return "All-to-All block tiles";
    case dev::WaitWhat::kQueueSlot:
      return "a free queue slot";
    case dev::WaitWhat::kOpDone:
      return "the engine to finish the op";
    case dev::WaitWhat::kIndex:
      return "an embedding index";
    case dev::WaitWhat::kCounts:
      return "its send counts (GEMM + All-to-All route)";
    case dev::WaitWhat::kPartial:
      return "its partial sums of a split tile";
    case dev::WaitWhat::kSignature:
      return "its op signature word";
    case dev::WaitWhat::kHandover:
      return "the persistent kernel to start the op (saw: the op's ready word; its stream never wrote it, or no "
             "kernel took it; a stream that shares the GPU's hardware queue with the resident kernel holds it "
             "back: set CUDA_DEVICE_MAX_CONNECTIONS=32 or use engine=launched)";
    case dev::WaitWhat::kProxyRoom:
      return "room in the host proxy's trigger ring (the proxy thread is not draining it)";
    default:
      return "nothing";
  }
}

void WorkQueue::failTransport(int peer) {
  dev::recordHostFailure(*header_, dev::WaitSite{0, 0, peer, dev::WaitWhat::kNone}, Status::kTransport, 0, 0);
}

std::string WorkQueue::failureText(int self) const {
  const dev::WaitRecord* r = firstFailure(*header_);
  return r ? weft::failureText(*r, self) : "";
}

bool opStarted(const dev::QueueSlot& slot, uint64_t ticket) {
  const uint64_t claim = prim::atomicLoad<prim::Order::kRelaxed>(&slot.claim);
  return static_cast<uint32_t>(claim >> 32) == static_cast<uint32_t>(ticket) && static_cast<uint32_t>(claim) != 0;
}

const dev::WaitRecord* firstFailure(const dev::QueueHeader& h) {
  if (prim::atomicLoad<prim::Order::kAcquire>(&h.recordValid)) return &h.record;
  if (prim::atomicLoad<prim::Order::kAcquire>(&h.hostRecordValid)) return &h.hostRecord;
  return nullptr;
}

Status failureStatus(const dev::QueueHeader& h) {
  if (const dev::WaitRecord* r = firstFailure(h)) return static_cast<Status>(r->status);
  return static_cast<Status>(prim::atomicLoad<prim::Order::kAcquire>(&h.error));
}

std::string failureText(const dev::WaitRecord& r, int self) {
  if (r.status == static_cast<uint32_t>(Status::kMismatch)) return mismatchText(r, self);
  // Recorded by a kernel outside weft's engine (weft.h: weft_device_status_t), e.g. weft.triton's.
  if (r.ticket == dev::kExternalTicket && static_cast<dev::WaitWhat>(r.what) == dev::WaitWhat::kExternal) {
    if (r.status == static_cast<uint32_t>(Status::kBadInput))
      return "invalid input found by a kernel outside weft's engine (rank " + std::to_string(r.peer) +
             ", the kernel's code " + std::to_string(r.item) + "): limit " + std::to_string(r.expected) + ", found " +
             std::to_string(static_cast<int64_t>(r.observed));
    return "timed out in a kernel outside weft's engine (program " + std::to_string(r.item) + ") waiting on rank " +
           std::to_string(r.peer) + " for its signal: expected >= " + std::to_string(r.expected) + ", saw " +
           std::to_string(r.observed);
  }
  if (r.status == static_cast<uint32_t>(Status::kBadInput)) {
    const std::string op = "invalid input in op #" + std::to_string(r.ticket) + ": ";
    const std::string rank = "rank " + std::to_string(r.peer);
    switch (static_cast<dev::WaitWhat>(r.what)) {
      case dev::WaitWhat::kSendCounts:
        return op + rank + "'s send_counts are negative or do not sum to its tokens";
      case dev::WaitWhat::kExpertOffsets:
        return op + rank + "'s expert_offsets do not rise from 0 to its tokens";
      case dev::WaitWhat::kCapacity:
        return op + rank + " would receive " + std::to_string(r.observed) + " rows, more than its recv_capacity (" +
               std::to_string(r.expected) + ")";
      case dev::WaitWhat::kOpKind:
        return op + "this rank's engine does not run op kind " + std::to_string(r.observed) +
               " (a library and engine of different builds?)";
      case dev::WaitWhat::kRecvOffset:
        return op + rank + "'s recv is not the buffer rank 0 passed (heap offset " + std::to_string(r.observed) +
               ", rank 0's " + std::to_string(r.expected) + "); every rank must pass the same weft_mem_alloc block";
      default:
        break;
    }
    if (r.peer >= 0)
      return op + "rank " + std::to_string(r.peer) + " found an embedding index out of its table's range";
    return op + "indices: " + std::to_string(static_cast<int64_t>(r.observed)) + " is not a row of table " +
           std::to_string(r.item) + " (" + std::to_string(r.expected) + " rows)";
  }
  if (static_cast<dev::WaitWhat>(r.what) == dev::WaitWhat::kPeerGone && r.peer == kWeftdEngineFailed)
    return "weftd's engine of this communicator (weftd pid " + std::to_string(r.observed) +
           ") failed on its GPU (weftd's log says how); every op of the communicator fails";
  if (static_cast<dev::WaitWhat>(r.what) == dev::WaitWhat::kPeerGone && r.peer < 0)
    return "weftd (pid " + std::to_string(r.observed) +
           "), which ran this communicator's engine, has ended; every op of the communicator fails";
  if (static_cast<dev::WaitWhat>(r.what) == dev::WaitWhat::kPeerGone)
    return "rank " + std::to_string(r.peer) + "'s process (pid " + std::to_string(r.observed) +
           ") ended without destroying the communicator (" +
           (r.expected == kGoneSeenByRank ? "a rank of its host saw it end" : "weftd saw its connection close") +
           "); every op of the communicator fails";
  const char* what = r.status == static_cast<uint32_t>(Status::kAborted) ? "aborted" : "timed out";
  // A split GEMM wave's partials come from this rank's own blocks: `peer` is the range's index.
  const bool local = static_cast<dev::WaitWhat>(r.what) == dev::WaitWhat::kPartial;
  std::string peer = local         ? "range " + std::to_string(r.peer) + " of this rank's split GEMM wave"
                     : r.peer >= 0 ? "rank " + std::to_string(r.peer)
                                   : "the local engine";
  return std::string(what) + " in op #" + std::to_string(r.ticket) + " (work item " + std::to_string(r.item) +
         ") waiting on " + peer + " for " + waitWhatName(static_cast<dev::WaitWhat>(r.what)) +
         ": expected >= " + std::to_string(r.expected) + ", saw " + std::to_string(r.observed);
}

}  // namespace weft
