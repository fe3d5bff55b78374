// Host side of the work queue (protocol in device/queue_device.hpp). The ring lives in shared
// memory from the start, so a submitter in another process (weftd clients) can use it.
// Thread-safe: several threads may submit at once; ticket order is the order ops execute in.
#pragma once

#include <cstdint>
#include <string>

#include "device/queue_device.hpp"
#include "transport/p2p/shm_segment.hpp"

namespace weft {

// What the host sees of an op while it waits on it, for the status page (status_page.hpp): one
// entry per slot, written only by the thread that submits the slot's op and waits on it.
struct SlotProgress {
  uint64_t ticket;     // the op the other words are about
  uint64_t itemsDone;  // its items finished, as last seen
  uint64_t startNs;    // when every earlier op had completed (CLOCK_MONOTONIC); 0 before
};

// WaitRecord::peer of a kPeerGone record (observed: weftd's pid) that weftd writes when its engine
// of the communicator failed on its own (a GPU kernel's fault); -1 is weftd's own end.
constexpr int32_t kWeftdEngineFailed = -2;
// WaitRecord::expected of a kPeerGone record: who saw the process end.
constexpr uint64_t kGoneSeenByWeftd = 0, kGoneSeenByRank = 1;

class WorkQueue {
 public:
  static constexpr uint32_t kMaxWorkers = 1024;  // the engine's `alive` words follow the slots

  explicit WorkQueue(uint32_t depth);
  // Over `memory` (at least bytesFor(depth), zero-filled), which another process made (weftd).
  WorkQueue(uint32_t depth, transport::ShmSegment memory);
  static size_t bytesFor(uint32_t depth);

  dev::QueueHeader* header() const { return header_; }
  dev::QueueSlot* slots() const { return slots_; }
  uint32_t* alive() const { return reinterpret_cast<uint32_t*>(slots_ + depth()); }
  // A word that always holds 1, in the same shared memory (the GPU can copy from it).
  uint32_t* one() const { return alive() + kMaxWorkers; }
  uint32_t depth() const { return header_->depth; }

  // Takes the next ticket. Callers that must agree with peers on op order take it under their lock.
  uint64_t reserve();
  // Waits (bounded by timeoutNs, abortable) until the ticket's slot is free, then fills it with
  // `desc`; the engine starts on it once `ready` is set (markReady, or a stream write of
  // readyWord). Returns kTimeout / kAborted / kPeerFailed without filling; the failure is recorded
  // in the header and the communicator is unusable.
  dev::Status publish(uint64_t ticket, const dev::OpDesc& desc, bool hostWaits, uint64_t timeoutNs);
  void markReady(uint64_t ticket);
  uint64_t* readyWord(uint64_t ticket) const { return &slots_[ticket % depth()].ready; }
  uint64_t* doneWord(uint64_t ticket) const { return &slots_[ticket % depth()].done; }
  // After the engine has stopped: completes every op it had not finished, as aborted, so that no
  // host or stream waits on it forever.
  void completeUnfinished();
  // completeUnfinished by a thread that has raised `abort` (or seen it raised) where no engine
  // will serve the queue again (weftd gone or its kernel dead). Its full fence pairs with the one
  // of completeIfAborted, so that an op published meanwhile is completed by one side or the other.
  void completeAborted();
  // A submitter, after publishing an op for such a queue: completes the slots if `abort` is up.
  void completeIfAborted();
  // Ops taken but not completed.
  uint64_t inFlight() const;
  void* memory() const { return shm_.data(); }
  size_t bytes() const { return shm_.size(); }
  // Host wait for an op published with hostWaits: returns its status and frees the slot. Bounded
  // by engine progress: gives up when nothing moved for `stallNs`; after an abort, gives the
  // engine `abortGraceNs` to finish the op before returning kAborted.
  dev::Status wait(uint64_t ticket, uint64_t stallNs, uint64_t abortGraceNs);
  // Host waits write what they see of their op into rows[ticket % depth] (null: nowhere).
  // Set before ops are submitted and cleared after the last one returns.
  void reportProgress(SlotProgress* rows) { progress_ = rows; }

  // The process `pid` of rank `peer` ended without destroying the communicator (-1: weftd, which
  // ran this queue's engine); `seenBy`: who saw it end (kGoneSeenByWeftd or kGoneSeenByRank).
  // Records that as the communicator's failure, which every host wait reads; for weftd also raises
  // `abort` (no engine is left to finish the ops).
  void failPeerGone(int peer, int pid, uint64_t seenBy);
  // The host proxy found peer `peer` (-1: none in particular) failed; the proxy holds its words.
  void failTransport(int peer);
  // Records a failure the host found while waiting on op `ticket` (the host's first wins, sticky).
  void recordHostFailure(uint64_t ticket, dev::Status st, uint64_t expected, uint64_t observed,
                         dev::WaitWhat what = dev::WaitWhat::kOpDone);
  // Human-readable first failure of the communicator ("" if none).
  std::string failureText(int self = -1) const;  // self: this rank, for the message

 private:
  // Out of the wait loop: runs only when the op's progress moved.
  void noteProgress(uint64_t ticket, uint64_t now);

  transport::ShmSegment shm_;
  dev::QueueHeader* header_;
  dev::QueueSlot* slots_;
  SlotProgress* progress_ = nullptr;
};

// The communicator's first failure, as every host reader reports it: the record of the kernel
// that claimed `error`, else the host's (QueueHeader: each side claims among itself); null while
// neither is written.
const dev::WaitRecord* firstFailure(const dev::QueueHeader& h);
// Its status: the first failure's, else whatever `error` holds (kOk: none).
dev::Status failureStatus(const dev::QueueHeader& h);

// Whether a worker has claimed an item of op `ticket` in `slot` (the op has started: from then on
// its waits are the kernel's own). The claim word carries the ticket's low 32 bits, so a slot's
// previous op's claims do not count.
bool opStarted(const dev::QueueSlot& slot, uint64_t ticket);

const char* waitWhatName(dev::WaitWhat w);
// A failure record in words (what WorkQueue::failureText says of the communicator's first).
std::string failureText(const dev::WaitRecord& r, int self = -1);

}  // namespace weft
