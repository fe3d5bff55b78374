// The communicator as the engine sees it, and the three communication primitives every operator
// is written with: put (move bytes into a peer's heap), signal (publish that they are there) and
// wait (bounded, abortable acquire poll). The host runtime builds CommView; workers only read it.
#pragma once

#include <cstdint>
#include <cstring>

#include "coop_device.hpp"
#include "heap_layout_device.hpp"
#include "ll128_device.hpp"
#include "ll_device.hpp"
#include "primitives_device.hpp"
#include "proxy_device.hpp"
#include "queue_device.hpp"
#include "vector_device.hpp"

namespace weft::dev {

struct CommView {
  int32_t rank = 0;
  int32_t nranks = 0;
  // [nranks + 1]: the base of every rank's heap in this address space (for a peer reached through
  // the host proxy, this rank's mirror of it: proxy_device.hpp), then the ProxyView or null.
  uint8_t* const* heap = nullptr;
  HeapLayout layout;
  QueueHeader* queue = nullptr;
  EngineControl* control = nullptr;  // this rank's engine words (heap offset 0); null on host-side waits
  QueueSlot* slots = nullptr;
  uint32_t* alive = nullptr;  // [workers] 1 while worker w runs or is about to (see engine_device.hpp)
  uint64_t timeoutNs = 0;     // bound of every wait
  uint64_t idleNs = 0;        // a worker idle this long with no ticket outstanding exits; 0: never

  WEFT_HOST_DEVICE uint64_t* signal(int owner, uint64_t offset) const {
    return reinterpret_cast<uint64_t*>(heap[owner] + offset);
  }
  WEFT_HOST_DEVICE uint8_t* at(int owner, uint64_t offset) const { return heap[owner] + offset; }
};
// Every kernel takes the view by value, and the GEMV kernel sits at its register limit: 8 more
// bytes here once moved ptxas to 1 KB more stack in it and made the fused GEMV 20% slower
// (docs/archive/perf-journal-2026-11.md). Grow the view only with a GEMV benchmark run beside it.
static_assert(sizeof(CommView) == 88, "CommView is in every kernel's parameters: see the note above");

// An op's protocol numbers, the same on every rank (from OpCounters, engine_device.hpp).
struct OpSeq {
  uint64_t op;       // the op's number on the communicator, from 0
  uint64_t seqBase;  // its kind's signal counter before it; the flagged exchange's ops: their lines' flag
                     // (ops/flagged_exchange_device.hpp, exchangeFlag)
  uint64_t epoch;    // ops of its kind so far, this one included
};

// The running op's number among the ops that meet the peers (OpCounters::collectives before it),
// which numbers its signature words (signature_device.hpp). The engine notes it where it reads the
// op's counters: per thread block on a GPU (block-shared), per worker thread on the CPU. Not an
// OpSeq field: a fourth word there, live across every kernel's item loop, took the GEMV kernel
// from a 368-byte to a 1064-byte stack (ptxas -v, sm_90a); only the items that publish or compare
// a word read it.
#if defined(WEFT_DEVICE_PASS)
static __shared__ uint64_t gRunningOpMeet;
#else
inline thread_local uint64_t gRunningOpMeet = 0;
#endif
// Written by every thread of the group (the same value) or by its leader before a barrier.
WEFT_HOST_DEVICE void noteRunningOpMeet(uint64_t meet) { gRunningOpMeet = meet; }
WEFT_HOST_DEVICE uint64_t runningOpMeet() { return gRunningOpMeet; }

// Identifies a wait for the failure record.
struct WaitSite {
  uint64_t ticket;
  uint32_t item;
  int32_t peer;
  WaitWhat what;
};

// Copies `bytes` into (possibly peer) memory. Every thread of the group takes part, with
// kUnroll independent 16-byte loads in flight before its stores.
template <class Coop>
WEFT_HOST_DEVICE void put(const Coop& c, void* dst, const void* src, uint64_t bytes) {
#if defined(WEFT_BACKEND_CPU)
  if (bytes) memcpy(dst, src, bytes);
#else
  auto d = static_cast<uint8_t*>(dst);
  auto s = static_cast<const uint8_t*>(src);
  uint64_t done = 0;
  if (aligned16(d) && aligned16(s)) {
    const uint64_t nvec = bytes / kVecBytes;
    const uint64_t stride = static_cast<uint64_t>(c.size()) * kUnroll;
    for (uint64_t v0 = c.rank(); v0 < nvec; v0 += stride) {
      Vec16 x[kUnroll];
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t v = v0 + u * static_cast<uint64_t>(c.size());
        if (v < nvec) x[u] = load16(s + v * kVecBytes);
      }
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t v = v0 + u * static_cast<uint64_t>(c.size());
        if (v < nvec) store16(d + v * kVecBytes, x[u]);
      }
    }
    done = nvec * kVecBytes;
  }
  for (uint64_t b = done + c.rank(); b < bytes; b += c.size()) d[b] = s[b];
#endif
}

// Leader-only: a release store at system scope into a (possibly peer) signal word.
WEFT_HOST_DEVICE void releaseStore(uint64_t* flag, uint64_t value) {
  prim::crossProcessRelease();
  prim::atomicStore<prim::Order::kRelease>(flag, value);
}

// Publishes everything the group wrote before it: the group syncs, then its leader stores with
// release order at system scope (cumulative over the writes the barrier ordered before it).
template <class Coop>
WEFT_HOST_DEVICE void signalStore(const Coop& c, uint64_t* flag, uint64_t value) {
  c.sync();
  if (c.leader()) releaseStore(flag, value);
}
template <class Coop>
WEFT_HOST_DEVICE void signalAdd(const Coop& c, uint64_t* flag, uint64_t value) {
  c.sync();
  if (c.leader()) {
    prim::crossProcessRelease();
    prim::atomicFetchAdd<prim::Order::kRelease>(flag, value);
  }
}

// A failure a host thread found: claimed among host threads on the header's host words, then
// shown to every wait by a plain store of `error` (QueueHeader says why never a CAS there).
// Returns whether this call was the host's first.
inline bool recordHostFailure(QueueHeader& q, const WaitSite& site, Status st, uint64_t expected, uint64_t observed) {
  uint32_t none = 0;
  if (!prim::atomicCas<prim::Order::kAcqRel>(&q.hostError, none, static_cast<uint32_t>(st))) return false;
  q.hostRecord =
      WaitRecord{site.ticket, site.item, site.peer, static_cast<uint32_t>(site.what), static_cast<uint32_t>(st),
                 expected,    observed};
  prim::atomicStore<prim::Order::kRelease>(&q.hostRecordValid, 1u);
  // A kernel's claim in between keeps its record; `error` then holds either status.
  if (prim::atomicLoad<prim::Order::kAcquire>(&q.error) == 0)
    prim::atomicStore<prim::Order::kRelease>(&q.error, static_cast<uint32_t>(st));
  return true;
}

// Records the first failure of the communicator; later failures only return their status. The
// engine decides "first" on its own control word, then claims the host-visible header's `error`.
// Host-side waits have no control word: theirs is a host thread's failure (recordHostFailure).
// Returns whether this call was the first.
WEFT_HOST_DEVICE bool recordFailure(const CommView& v, const WaitSite& site, Status st, uint64_t expected,
                                    uint64_t observed) {
#if !defined(WEFT_DEVICE_PASS)
  if (!v.control) return recordHostFailure(*v.queue, site, st, expected, observed);
#endif
  uint32_t none = 0;
  if (v.control && !prim::atomicCas<prim::Order::kAcqRel>(&v.control->error, none, static_cast<uint32_t>(st)))
    return false;
  none = 0;
  if (!prim::atomicCas<prim::Order::kAcqRel>(&v.queue->error, none, static_cast<uint32_t>(st))) return false;
  WaitRecord& r = v.queue->record;
  r.ticket = site.ticket;
  r.item = site.item;
  r.peer = site.peer;
  r.what = static_cast<uint32_t>(site.what);
  r.status = static_cast<uint32_t>(st);
  r.expected = expected;
  r.observed = observed;
  prim::atomicStore<prim::Order::kRelease>(&v.queue->recordValid, 1u);
  return true;
}

// Why waits give up early: abort/destroy, or an earlier failure of the communicator. The engine
// reads its own control words; host-side waits read the queue header.
WEFT_HOST_DEVICE Status stopReason(const CommView& v) {
  const uint32_t* abort = v.control ? &v.control->abort : &v.queue->abort;
  const uint32_t* stop = v.control ? &v.control->stop : &v.queue->stop;
  const uint32_t* error = v.control ? &v.control->error : &v.queue->error;
  // Three independent loads, not a chain of three round trips (every launched op reads them first).
  const uint32_t aborted = prim::atomicLoad<prim::Order::kRelaxed>(abort);
  const uint32_t stopped = prim::atomicLoad<prim::Order::kRelaxed>(stop);
  const uint32_t failed = prim::atomicLoad<prim::Order::kRelaxed>(error);
  if (aborted | stopped) return Status::kAborted;
  return failed ? Status::kPeerFailed : Status::kOk;
}

// The slow path of a wait on a peer (signature_device.hpp): whether the peer has published its
// signature word of this op and it differs from this rank's own (*mine, *theirs: the two words). A
// peer that runs another op, or the same op with other arguments, may never send what the wait is
// for; this finds it within the wait's clock checks instead of at the timeout.
WEFT_HOST_DEVICE bool peerDisagrees(const CommView& v, const WaitSite& site, uint64_t* mine, uint64_t* theirs) {
  switch (site.what) {
    case WaitWhat::kInboxData:
    case WaitWhat::kInboxCredit:
    case WaitWhat::kGather:
    case WaitWhat::kReady:
    case WaitWhat::kArrival:
    case WaitWhat::kCounts:
    case WaitWhat::kSignature:
      break;
    default:
      return false;
  }
  if (v.control == nullptr || site.peer < 0 || site.peer >= v.nranks || site.peer == v.rank) return false;
  // This rank's newest word is the running op's once published (or else the previous op's, which
  // both ranks passed): compare with the peer's word of the same op, if it has one.
  const uint64_t even = prim::atomicLoad<prim::Order::kRelaxed>(v.signal(v.rank, v.layout.sigOffset(v.rank, 0)));
  const uint64_t odd = prim::atomicLoad<prim::Order::kRelaxed>(v.signal(v.rank, v.layout.sigOffset(v.rank, 1)));
  *mine = (even >> 32) > (odd >> 32) ? even : odd;
  if (*mine == 0) return false;
  const uint64_t meet = (*mine >> 32) - 1;  // as sigWord numbers it
  *theirs = prim::atomicLoad<prim::Order::kRelaxed>(v.signal(v.rank, v.layout.sigOffset(site.peer, meet)));
  return (*theirs >> 32) == (*mine >> 32) && *mine != *theirs;
}

// Whether the wait's peer has published its word of this op and disagrees (peerDisagrees); a
// mismatch is recorded here. Out of line on a GPU: it runs only on the slow path, and inlined into
// every wait it raised the op kernel's registers (ptxas -v). The view goes by address, which costs
// nothing because every kernel takes it as a __grid_constant__ parameter (gpu/kernels.hpp):
// without that, taking its address made each kernel copy it to its stack. The site goes by value
// for the same reason.
WEFT_HOST_DEVICE WEFT_OUT_OF_LINE Status peerCheck(const CommView& v, WaitSite site) {
  uint64_t mine = 0, theirs = 0;
  if (!peerDisagrees(v, site, &mine, &theirs)) return Status::kOk;
  site.what = WaitWhat::kSignature;
  recordFailure(v, site, Status::kMismatch, mine, theirs);
  return Status::kMismatch;
}

// How often a wait checks its stop reason and clock (every 64 polls), and its peer's signature
// word (every 1024): the word is two dependent loads, which every 64 polls held the one-shot
// AllReduce's line waits long enough to cost 16 KB 0.8 us on 2 H200, where its lines land within
// a few dozen polls; a peer that disagrees is still found within a millisecond or so.
constexpr uint32_t kStopCheckPolls = 64, kPeerCheckPolls = 1024;

// Polls `ready(&seen)` until it returns true, the timeout expires, or the communicator stops;
// abort and the clock are checked every kStopCheckPolls polls and (kPeerCheck) the peer's
// signature word every kPeerCheckPolls. A failure is recorded with `expected` and the last `seen`.
//
// kPeerCheck false: the fused GEMV's reduction, at its register limit, whose op is checked once
// instead, by one item that compares every peer's word (flagged_exchange_device.hpp); a
// difference found there fails the communicator, which these waits see in the stop reason.
template <bool kPeerCheck = true, typename Ready>
WEFT_HOST_DEVICE Status pollUntil(const CommView& v, const WaitSite& site, uint64_t expected, Ready&& ready) {
  uint64_t seen = 0;
  if (ready(&seen)) return Status::kOk;
  const uint64_t start = prim::nowNs();
  for (uint32_t spins = 1;; ++spins) {
    prim::relax(spins);
    if (ready(&seen)) return Status::kOk;
    if (spins % kStopCheckPolls != 0) continue;
    Status st = stopReason(v);
    if constexpr (kPeerCheck)
      if (st == Status::kOk && spins % kPeerCheckPolls == 0) st = peerCheck(v, site);
    if (st == Status::kOk && prim::nowNs() - start > v.timeoutNs) st = Status::kTimeout;
    if (st != Status::kOk) {
      if (st != Status::kPeerFailed && st != Status::kMismatch) recordFailure(v, site, st, expected, seen);
      return st;
    }
  }
}

// Leader-only: polls until *flag >= atLeast (acquire, at scope S: kDevice where the writer is a
// block of the same GPU).
template <prim::Scope S = prim::Scope::kSystem>
WEFT_HOST_DEVICE Status pollAtLeast(const CommView& v, const uint64_t* flag, uint64_t atLeast, const WaitSite& site) {
  return pollUntil(v, site, atLeast, [&](uint64_t* seen) {
    *seen = prim::atomicLoad<prim::Order::kAcquire, S>(flag);
    if (*seen < atLeast) return false;
    prim::crossProcessAcquire();
    return true;
  });
}

// Any thread: waits for the flagged line pair at `line` to carry `flag`; *payload gets its bytes.
// kPeerCheck: as pollUntil's (false in the fused GEMV's reduction, which checks the op once).
template <bool kPeerCheck = true>
WEFT_HOST_DEVICE Status llWait(const CommView& v, const uint64_t* line, uint32_t flag, uint64_t* payload,
                               const WaitSite& site) {
  return pollUntil<kPeerCheck>(v, site, flag, [&](uint64_t* seen) {
    uint32_t seenFlag = 0;
    const bool ok = llLoad(line, flag, payload, &seenFlag);
    *seen = seenFlag;
    return ok;
  });
}

// Waits until the 128-byte line at `line` carries `flag` (ll128_device.hpp); *s gets this thread's
// share of it. On a GPU the whole warp calls it together (a thread with no line passes null and
// only keeps step), polls its lines with one load each, and gets one status: the line's lanes read
// in one instruction, so the flag lane seeing `flag` vouches for the others' words. The stop and
// timeout checks are lane 0's, handed to the warp, so that no lane leaves the loop alone, and so
// is the comparison of the peer's signature word (peerCheck).
WEFT_HOST_DEVICE Status lineWait(const CommView& v, const uint64_t* line, uint64_t flag, LineShare* s,
                                 const WaitSite& site) {
#if defined(WEFT_DEVICE_PASS)
  const int lane = static_cast<int>(threadIdx.x) % prim::kWarpSize;
  uint64_t seen = flag;
  auto landed = [&] { return prim::warpAll(line == nullptr || linePeek(line, s, lane, flag, &seen)); };
  if (landed()) return Status::kOk;
  const uint64_t start = prim::nowNs();
  for (uint32_t spins = 1;; ++spins) {
    prim::relax(spins);
    if (landed()) return Status::kOk;
    if (spins % kStopCheckPolls != 0) continue;
    auto st = Status::kOk;
    if (lane == 0) {
      st = stopReason(v);
      if (st == Status::kOk && spins % kPeerCheckPolls == 0) st = peerCheck(v, site);
      if (st == Status::kOk && prim::nowNs() - start > v.timeoutNs) st = Status::kTimeout;
    }
    st = static_cast<Status>(prim::warpBroadcast(static_cast<uint32_t>(st), 0));
    if (st == Status::kOk) continue;
    const int stale = prim::warpFirst(line != nullptr && seen != flag);  // the lane that saw an old flag
    if (st != Status::kPeerFailed && st != Status::kMismatch && lane == (stale < 0 ? 0 : stale))
      recordFailure(v, site, st, flag, seen);
    return st;
  }
#else
  return pollUntil(v, site, flag, [&](uint64_t* seen) { return linePeek(line, s, 0, flag, seen); });
#endif
}

// The whole group waits; every thread gets the leader's result (memory is acquired by the leader
// and published to the group by the broadcast barrier).
template <prim::Scope S = prim::Scope::kSystem, class Coop>
WEFT_HOST_DEVICE Status wait(const Coop& c, const CommView& v, const uint64_t* flag, uint64_t atLeast,
                             const WaitSite& site) {
  Status st = c.leader() ? pollAtLeast<S>(v, flag, atLeast, site) : Status::kOk;
  return c.broadcast(st);
}

// The whole group waits until every peer's word `which` in this rank's control area reaches
// `atLeast` (and this rank's own word, with andSelf); the usual last item of an op ("everything
// every peer sends me has landed"). Threads
// poll different peers at once, so the wait costs one memory latency, not one per peer.
template <class Coop>
WEFT_HOST_DEVICE Status waitEveryPeer(const Coop& c, const CommView& v, PeerSignal which, uint64_t atLeast, uint64_t op,
                                      uint32_t item, WaitWhat what, bool andSelf = false) {
  Status st = Status::kOk;
  for (int p = (andSelf ? 0 : 1) + c.rank(); p < v.nranks && st == Status::kOk; p += c.size()) {
    const int src = (v.rank + p) % v.nranks;
    st =
        pollAtLeast(v, v.signal(v.rank, v.layout.peerSignalOffset(which, src)), atLeast, WaitSite{op, item, src, what});
  }
  // The thread that failed recorded why; the barrier also hands every thread the others' acquires.
  return c.any(st != Status::kOk) ? Status::kPeerFailed : Status::kOk;
}

// ---- Peers reached through the host proxy (proxy_device.hpp) ----
// Every write to a peer below goes to heap[peer]: the peer's own memory where it is mapped, this
// rank's mirror of it where it is reached through the proxy. The *To primitives then post what
// the proxy must carry; on a mapped peer they are the plain primitives above.

// Null where device code is not built to post (kProxyInDevice), so that every proxy branch below
// compiles away there.
WEFT_HOST_DEVICE const ProxyView* proxyOf(const CommView& v) {
  if constexpr (kProxyInDevice) return reinterpret_cast<const ProxyView*>(v.heap[v.nranks]);
  return nullptr;
}
WEFT_HOST_DEVICE bool viaProxy(const CommView& v, int peer) {
  const ProxyView* p = proxyOf(v);
  return p != nullptr && p->viaProxy[peer] != 0;
}

// A status some threads of the group computed (the leader's posts), seen by every thread where a
// proxy could have made it fail; a mapped-only communicator never does (and the direct GPU kernels
// compile the barrier away).
template <class Coop>
WEFT_HOST_DEVICE Status uniform(const Coop& c, const CommView& v, Status st) {
  return proxyOf(v) != nullptr ? c.any(st != Status::kOk) ? Status::kPeerFailed : Status::kOk : st;
}

// Leader-only: claims a slot of the ring, waiting (bounded, abort-checked) while it is full, and
// commits the trigger. Release at system scope first: the proxy reads the mirror bytes the group
// wrote before it (the group synced before the leader got here).
WEFT_HOST_DEVICE Status postTrigger(const CommView& v, const WaitSite& site, uint64_t w0, uint64_t w1) {
  const ProxyView* p = proxyOf(v);
  const uint64_t ticket = prim::atomicFetchAdd<prim::Order::kRelaxed, prim::Scope::kDevice>(p->head, uint64_t{1});
  if (ticket >= prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(p->tailSeen) + p->depth) {
    uint64_t tail = 0;
    const Status st = pollUntil(v, site, ticket - p->depth + 1, [&](uint64_t* seen) {
      *seen = tail = prim::atomicLoad<prim::Order::kAcquire>(p->tail);
      return ticket < tail + p->depth;
    });
    if (st != Status::kOk) return st;
    prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(p->tailSeen, tail);
  }
  Trigger* t = p->ring + (ticket & (p->depth - 1));
  prim::crossProcessRelease();
  prim::atomicStore<prim::Order::kRelaxed>(&t->w1, w1);
  prim::atomicStore<prim::Order::kRelease>(&t->w0, w0 | commitFor(ticket, p->depth));
  return Status::kOk;
}

// Leader-only: posts n triggers (at most kBurstMax) as one claim of n slots, committed last to
// first. The proxy takes slots in order and stops at the first it finds uncommitted, so it finds
// the n together and sends those to one peer as one message (transport/proxy: batches): a tile's
// put and the signals after it cost one network message instead of two or three.
constexpr uint32_t kBurstMax = 4;
WEFT_HOST_DEVICE Status postTriggers(const CommView& v, const WaitSite& site, const uint64_t* w0, const uint64_t* w1,
                                     uint32_t n) {
  const ProxyView* p = proxyOf(v);
  const uint64_t first = prim::atomicFetchAdd<prim::Order::kRelaxed, prim::Scope::kDevice>(p->head, uint64_t{n});
  const uint64_t last = first + n - 1;
  if (last >= prim::atomicLoad<prim::Order::kRelaxed, prim::Scope::kDevice>(p->tailSeen) + p->depth) {
    uint64_t tail = 0;
    const Status st = pollUntil(v, site, last - p->depth + 1, [&](uint64_t* seen) {
      *seen = tail = prim::atomicLoad<prim::Order::kAcquire>(p->tail);
      return last < tail + p->depth;
    });
    if (st != Status::kOk) return st;
    prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(p->tailSeen, tail);
  }
  prim::crossProcessRelease();
  for (uint32_t i = n; i-- > 0;) {
    Trigger* t = p->ring + ((first + i) & (p->depth - 1));
    prim::atomicStore<prim::Order::kRelaxed>(&t->w1, w1[i]);
    prim::atomicStore<prim::Order::kRelease>(&t->w0, w0[i] | commitFor(first + i, p->depth));
  }
  return Status::kOk;
}

// Leader-only, after the group's stores of `rows` runs of `rowBytes` at `stride` from `offset` in
// peer's heap (one run: stride unused): has the proxy carry them, where the peer is reached so.
WEFT_HOST_DEVICE Status postRows(const CommView& v, const WaitSite& site, int peer, uint64_t offset, uint64_t rows,
                                 uint64_t rowBytes, uint64_t stride) {
  if (!viaProxy(v, peer) || rows == 0 || rowBytes == 0) return Status::kOk;
  if (rows == 1 || stride == rowBytes)
    return postTrigger(v, site, triggerWord0(TriggerKind::kPut, peer, offset), rows * rowBytes);
  if (rowBytes <= kRowBytesMax && stride <= kStrideMax) {
    for (uint64_t r0 = 0; r0 < rows; r0 += kRowsMax) {
      const uint64_t n = rows - r0 < kRowsMax ? rows - r0 : kRowsMax;
      const Status st = postTrigger(v, site, triggerWord0(TriggerKind::kPutRows, peer, offset + r0 * stride),
                                    rowsWord(n, rowBytes, stride));
      if (st != Status::kOk) return st;
    }
    return Status::kOk;
  }
  for (uint64_t r = 0; r < rows; ++r) {
    const Status st = postTrigger(v, site, triggerWord0(TriggerKind::kPut, peer, offset + r * stride), rowBytes);
    if (st != Status::kOk) return st;
  }
  return Status::kOk;
}

// Leader-only, after the group's stores of `rows` runs of `rowBytes` laid back to back in the
// mirror from `offset`, which belong at offset + i * stride in the peer's heap: has the proxy
// carry them as one message (at most packRunBytes(v), which the caller packed for).
WEFT_HOST_DEVICE Status postPacked(const CommView& v, const WaitSite& site, int peer, uint64_t offset, uint64_t rows,
                                   uint64_t rowBytes, uint64_t stride) {
  return postTrigger(v, site, triggerWord0(TriggerKind::kPutPacked, peer, offset), rowsWord(rows, rowBytes, stride));
}

// The most bytes of rows one kPutPacked may carry; 0 where nothing posts to a proxy.
WEFT_HOST_DEVICE uint64_t packRunBytes(const CommView& v) {
  const ProxyView* p = proxyOf(v);
  return p != nullptr ? p->packBytes : 0;
}

// Leader-only: releaseStore (add: atomic add) of `value` into peer's word at `offset`; through the
// proxy, a signal trigger, which the proxy delivers only once every byte posted to that peer
// before it is visible there.
WEFT_HOST_DEVICE Status signalLeaderTo(const CommView& v, int peer, uint64_t offset, uint64_t value, bool add,
                                       const WaitSite& site) {
  if (viaProxy(v, peer))
    return postTrigger(v, site, triggerWord0(add ? TriggerKind::kSignalAdd : TriggerKind::kSignalStore, peer, offset),
                       value);
  uint64_t* flag = v.signal(peer, offset);
  prim::crossProcessRelease();
  if (add)
    prim::atomicFetchAdd<prim::Order::kRelease>(flag, value);
  else
    prim::atomicStore<prim::Order::kRelease>(flag, value);
  return Status::kOk;
}

}  // namespace weft::dev
