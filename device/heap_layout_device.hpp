// Geometry of the control area at the start of every rank's symmetric heap. The area holds the
// signal words peers write into this rank and the inbox that carries AllReduce tiles; user buffers
// follow it. Every rank computes the same layout, so a peer's word is peerBase + offset.
#pragma once

#include <cstdint>

#include "ll128_device.hpp"
#include "primitives_device.hpp"

namespace weft::dev {

constexpr uint64_t kSignalStride = 64;  // one signal word per cache line: no false sharing between writers

// One word per peer in every rank's control area.
enum class PeerSignal : int {
  kReadyFrom = 0,       // All-to-All: the peer's output is ready for epoch e
  kArrived = 1,         // All-to-All: tiles the peer stored into this rank's output
  kGathered = 2,        // AllReduce: reduced tiles the peer stored into this rank's output
  kEmbedReadyFrom = 3,  // embedding All-to-All: the peer's output is ready for epoch e
  kEmbedDone = 4,       // embedding All-to-All: 2e once the peer stored all its vectors of epoch e
                        // (everywhere), 2e + 1 if it also found an index out of range
  kGemmSent = 5,        // GEMM + All-to-All, this rank's own: rows x column tiles it has stored
                        // into the peer in the running op (by destination; zero between ops)
  kGemmDone = 6,        // GEMM + All-to-All: e once the peer stored all its rows of epoch e here
  kSigEven = 7,         // the peer's signature word of its last even-numbered collective op
  kSigOdd = 8,          // ... and of its last odd-numbered one (signature_device.hpp)
};

// Protocol counters that every rank's engine advances alike, op after op, so that the ranks agree
// on them without talking. They live on the device, not in the descriptor, so that a captured CUDA
// graph replays correctly: each replay reads what the op before it left (engine_device.hpp).
struct OpCounters {
  uint64_t ops;            // ops run on this communicator (names an op in failure records)
  uint64_t allReduceSeq;   // reduce-scatter AllReduce: inbox sequence and gathered tiles, per pair
  uint64_t allToAllSeq;    // All-to-All: tiles, per pair
  uint64_t allToAllEpoch;  // All-to-All ops
  uint64_t oneShotEpoch;   // ops of the one-shot exchange (AllReduce, GEMV + AllReduce)
  uint64_t embedEpoch;     // embedding All-to-All ops
  uint64_t embedItems;     // embedding All-to-All: data items this rank ran, all ops together (local)
  uint64_t collectives;    // ops that meet the peers (all but the local GEMV and markers): signatures
};

// The first bytes of every heap: the words this rank's engine checks on its fast path, kept in the
// engine's own memory (device memory on a GPU) so that no poll crosses PCIe. Only the owning rank
// uses them.
struct EngineControl {
  uint32_t abort;       // host: weft_comm_abort (set through the backend)
  uint32_t stop;        // host: destroy
  uint32_t error;       // engine: the first failing wait's Status (the device-side arbiter)
  uint32_t blocksDone;  // launched engine: blocks of the running op kernel that read the counters
  OpCounters counters;  // moved on by an op's last worker, once every worker of the op has read them
  // The first out-of-range embedding index this rank found (badEpoch set last, by CAS from 0).
  uint32_t badEpoch;
  uint32_t badTable;
  int64_t badIndex;
  int64_t badRows;
  uint64_t embedItemsDone;  // embedding data items this rank finished, all ops together
  // Launched engine: items of the ops launched with OpDesc::countItems (the eager ones) finished,
  // all ops together. The host's status watch reads it to show how far the running op is
  // (runtime/status_watch.hpp); captured ops do not count, since the host never sees them run.
  uint64_t itemsFinished;
  uint64_t reserved;
  // Persistent engine: device-memory mirrors of two words of the work queue, which lives in pinned
  // host memory. Worker 0 alone polls the queue for the next op and publishes here the ticket it
  // saw ready (+ 1); an op's last worker publishes its completion here as well as in the queue. The
  // other workers poll these, so that an idle engine reads host memory from one block, not from
  // every block (engine_device.hpp, pollReady).
  uint64_t readySeen;
  uint64_t completed;
  // Persistent engine: the running op's item claims and items finished, each (ticket's low 32
  // bits << 32 | count). Ops run one at a time, so one word of each serves every slot; in device
  // memory because the atomics on them are every worker's, once per item (engine_device.hpp,
  // claimItem and finishItem).
  uint64_t claim;
  uint64_t finished;
  // Persistent engine: the slot's `limit` word (ticket tag << 32 | items) of the op worker 0 saw
  // ready, mirrored before readySeen, so that the workers that learn of the op from readySeen
  // find its item count in device memory.
  uint64_t opLimit;
  uint64_t padding[3];
};
static_assert(sizeof(EngineControl) == 192, "EngineControl is a wire struct");

struct HeapLayout {
  uint32_t nranks = 0;
  uint32_t inboxSlots = 0;    // tiles in flight per (sender, receiver) pair
  uint64_t tileBytes = 0;     // bytes of one inbox slot
  uint64_t oneShotBytes = 0;  // the largest one-shot AllReduce input (its scratch holds it twice over, see below)

  // Each array below is indexed by the peer that writes the word (or, for credits, that owns the slot).
  WEFT_HOST_DEVICE uint64_t peerSignalOffset(PeerSignal which, int peer) const {
    return signalOffset(static_cast<int>(which), peer);
  }
  WEFT_HOST_DEVICE uint64_t readyFromOffset(int peer) const { return peerSignalOffset(PeerSignal::kReadyFrom, peer); }
  WEFT_HOST_DEVICE uint64_t arrivedOffset(int peer) const { return peerSignalOffset(PeerSignal::kArrived, peer); }
  WEFT_HOST_DEVICE uint64_t gatheredOffset(int peer) const { return peerSignalOffset(PeerSignal::kGathered, peer); }
  // Where `peer` publishes its signature word of collective `meet` (runningOpMeet(); a rank's own
  // word is in its own array).
  WEFT_HOST_DEVICE uint64_t sigOffset(int peer, uint64_t meet) const {
    return peerSignalOffset((meet & 1) != 0 ? PeerSignal::kSigOdd : PeerSignal::kSigEven, peer);
  }
  WEFT_HOST_DEVICE uint64_t inboxFlagOffset(int peer, uint32_t slot) const { return slotSignalOffset(0, peer, slot); }
  WEFT_HOST_DEVICE uint64_t inboxCreditOffset(int peer, uint32_t slot) const { return slotSignalOffset(1, peer, slot); }
  WEFT_HOST_DEVICE uint64_t inboxDataOffset(int peer, uint32_t slot) const {
    return inboxBase() + (static_cast<uint64_t>(peer) * inboxSlots + slot) * tileBytes;
  }
  // The flagged exchange's scratch that `peer` writes into (the one-shot AllReduce's, the staged
  // All-to-All's and the fused GEMV's), for ops of the given parity: each holds one input in the
  // flagged-line format (ll_device.hpp), twice its size.
  WEFT_HOST_DEVICE uint64_t oneShotDataOffset(int peer, uint32_t parity) const {
    return oneShotBase() + (static_cast<uint64_t>(peer) * 2 + parity) * oneShotScratchBytes();
  }
  WEFT_HOST_DEVICE uint64_t oneShotScratchBytes() const { return 2 * oneShotBytes; }
  // The one-shot AllReduce's 128-byte lines (ll128_device.hpp) that `peer` writes, for ops of the
  // given parity: each area holds an input of oneShotBytes. Apart from the 8-byte lines above: a
  // stale 128-byte line holds raw payload, which an 8-byte line's reader could take for a flag.
  // (Sized from oneShotBytes, not a field of its own: the layout travels in every kernel's
  // parameters, and 8 more bytes of them cost the GEMV kernel 1 KB of stack: docs/archive/perf-journal-2026-11.md.)
  WEFT_HOST_DEVICE uint64_t lineDataOffset(int peer, uint32_t parity) const {
    return oneShotDataOffset(static_cast<int>(nranks), 0) +
           (static_cast<uint64_t>(peer) * 2 + parity) * lineScratchBytes();
  }
  WEFT_HOST_DEVICE uint64_t lineScratchBytes() const {
    return (linesFor(oneShotBytes) * kLineBytes + 255) & ~uint64_t{255};
  }
  // Bytes of the whole control area; user allocations start here (page aligned).
  WEFT_HOST_DEVICE uint64_t controlBytes() const {
    uint64_t end = lineDataOffset(static_cast<int>(nranks), 0);
    return (end + 4095) & ~uint64_t{4095};
  }

 private:
  static constexpr uint64_t kHeaderBytes = sizeof(EngineControl);
  static constexpr int kPeerArrays = 9;
  static constexpr int kSlotArrays = 2;

  WEFT_HOST_DEVICE uint64_t signalOffset(int array, int peer) const {
    return kHeaderBytes + (static_cast<uint64_t>(array) * nranks + peer) * kSignalStride;
  }
  WEFT_HOST_DEVICE uint64_t slotSignalOffset(int array, int peer, uint32_t slot) const {
    uint64_t base = signalOffset(kPeerArrays, 0);
    return base + ((static_cast<uint64_t>(array) * nranks + peer) * inboxSlots + slot) * kSignalStride;
  }
  WEFT_HOST_DEVICE uint64_t oneShotBase() const {
    uint64_t end = inboxBase() + static_cast<uint64_t>(nranks) * inboxSlots * tileBytes;
    return (end + 255) & ~uint64_t{255};
  }
  WEFT_HOST_DEVICE uint64_t inboxBase() const {
    uint64_t end = slotSignalOffset(kSlotArrays, 0, 0);
    return (end + 255) & ~uint64_t{255};
  }
};

}  // namespace weft::dev
