// Op signatures: what the ranks of a communicator must agree on for each op, so that a rank that
// passes another kind, dtype, count, shape or output block fails the op on every rank instead of
// reading or writing the wrong bytes.
//
// The host packs a 32-bit signature into OpDesc::sig (runtime/signature.cpp hashes the fields):
//   bits 27..31 the op as the caller named it (SigOp), 24..26 the dtype, 12..23 a hash of the
//   counts and shape peers depend on, 0..11 a hash of the heap offsets peers write into.
// A rank publishes `(meet + 1) << 32 | sig` (the op's number on the communicator, then the signature) into
// a word per (publisher, op parity) in each peer's control area, and its own. The word rides the
// signals the protocols already send: it is stored just before the signal (on a mapped peer a
// relaxed store that the signal's release orders; through the host proxy a signal trigger of its
// own), and the rank that acquires the signal compares it before it uses the peer's data or writes
// the peer's memory. Ops without a signal (the flagged exchanges) compare at the consumer, before
// the first result is stored. Ops are numbered for this by runningOpMeet(), which counts the ops that
// involve peers (a local GEMV does not): a peer's word of op n is overwritten only by its op
// n + 2, which it reaches only after this rank's op n + 1 has started (every op meets every peer),
// i.e. after this rank's checks of op n.
#pragma once

#include <cstdint>

#include "comm_device.hpp"

namespace weft::dev {

// The op as the caller named it: the AllReduce is one op whichever protocol the host picked (the
// protocol follows from count and dtype, so ranks that agree on those agree on it).
enum class SigOp : uint32_t {
  kAllReduce = 1,
  kAllToAll = 2,
  kGemvAllReduce = 3,
  kEmbeddingAllToAll = 4,
  kGemmAllToAll = 5,
};

constexpr uint32_t kSigOpShift = 27, kSigDtypeShift = 24, kSigShapeShift = 12;
constexpr uint32_t kSigHashMask = 0xfffu;

WEFT_HOST_DEVICE constexpr uint32_t makeSignature(SigOp op, uint32_t dtype, uint32_t shapeHash, uint32_t offsetHash) {
  return static_cast<uint32_t>(op) << kSigOpShift | (dtype & 7u) << kSigDtypeShift |
         (shapeHash & kSigHashMask) << kSigShapeShift | (offsetHash & kSigHashMask);
}
WEFT_HOST_DEVICE constexpr uint32_t sigOp(uint32_t sig) { return sig >> kSigOpShift; }
WEFT_HOST_DEVICE constexpr uint32_t sigDtype(uint32_t sig) { return (sig >> kSigDtypeShift) & 7u; }
WEFT_HOST_DEVICE constexpr uint32_t sigShape(uint32_t sig) { return (sig >> kSigShapeShift) & kSigHashMask; }
WEFT_HOST_DEVICE constexpr uint32_t sigOffsets(uint32_t sig) { return sig & kSigHashMask; }

// The signature as the flagged exchanges fold it into their lines' flags (flagged_exchange_device.hpp):
// multiplying by an odd constant is a bijection, so two signatures never give one flag, and 0 (the
// check off) stays 0, which leaves the flags as they are without the check.
WEFT_HOST_DEVICE constexpr uint32_t sigFlagBits(uint32_t sig) { return sig * 0x9e3779b1u; }

// The word a rank publishes for the op that is its collective number `meet` (runningOpMeet(), which
// local ops do not advance). With the check off (sig 0) empty ops still exchange words, whose
// signature half is then 0 on every rank. The number counts from 1 in the word, so that a word
// nobody wrote yet (zero) names no op.
WEFT_HOST_DEVICE constexpr uint64_t sigWord(uint64_t meet, uint32_t sig) { return (meet + 1) << 32 | sig; }
WEFT_HOST_DEVICE constexpr uint64_t sigMeet(uint64_t word) { return (word >> 32) - 1; }

// Leader-only: this rank's word of the op into peer's control area (peer == v.rank: its own).
// Ordered before the leader's next release (a signal) on a mapped peer; through the proxy a
// signal trigger, which the peer's proxy stores whole.
WEFT_HOST_DEVICE Status publishSig(const CommView& v, int peer, uint64_t word, const WaitSite& site) {
  const uint64_t at = v.layout.sigOffset(v.rank, sigMeet(word));
  if (peer != v.rank && viaProxy(v, peer))
    return postTrigger(v, site, triggerWord0(TriggerKind::kSignalStore, peer, at), word);
  prim::atomicStore<prim::Order::kRelaxed>(v.signal(peer, at), word);
  return Status::kOk;
}

// Leader-only where the op is checked (mine != 0): this rank's word into its own slot, which the
// waits' slow path compares with (comm_device.hpp, peerDisagrees). Written only after the word
// went to every peer, so that a rank whose slow path finds a difference has told every peer its
// word, and each of them finds it too.
WEFT_HOST_DEVICE void noteOwnSig(const CommView& v, uint64_t mine) {
  if (mine != 0)
    prim::atomicStore<prim::Order::kRelaxed>(v.signal(v.rank, v.layout.sigOffset(v.rank, sigMeet(mine))), mine);
}

// Leader-only: the word to every peer, then to this rank's own slot. Out of line on a GPU, as
// checkSig.
WEFT_HOST_DEVICE WEFT_OUT_OF_LINE Status publishSigEverywhere(const CommView& v, uint64_t word, uint64_t op,
                                                              uint32_t item) {
  Status st = Status::kOk;
  for (int p = 1; p < v.nranks && st == Status::kOk; ++p)
    st =
        publishSig(v, (v.rank + p) % v.nranks, word, WaitSite{op, item, (v.rank + p) % v.nranks, WaitWhat::kProxyRoom});
  if (st == Status::kOk) noteOwnSig(v, word);
  return st;
}

// Any thread: compares `peer`'s word of this op with `mine`, first waiting (bounded) for it to
// name this op where it does not yet (the proxy's messages, or a flagged exchange, may carry it
// after the data). A difference is recorded (both words) and fails the op. Out of line on a GPU:
// once per peer and op, and inlined into the waits of the op kernel's protocols it raised that
// kernel's registers (ptxas -v); the view goes by address at no cost (peerCheck says why).
WEFT_HOST_DEVICE WEFT_OUT_OF_LINE Status checkSig(const CommView& v, int peer, uint64_t mine, uint64_t op,
                                                  uint32_t item) {
  const uint64_t* word = v.signal(v.rank, v.layout.sigOffset(peer, sigMeet(mine)));
  // Relaxed: only the value is compared, nothing is read on the strength of it.
  uint64_t seen = prim::atomicLoad<prim::Order::kRelaxed>(word);
  const WaitSite site{op, item, peer, WaitWhat::kSignature};
  if ((seen >> 32) != (mine >> 32)) {
    const Status st = pollUntil(v, site, mine, [&](uint64_t* s) {
      *s = seen = prim::atomicLoad<prim::Order::kRelaxed>(word);
      return (seen >> 32) == (mine >> 32);
    });
    if (st != Status::kOk) return st;
  }
  if (seen == mine) return Status::kOk;
  // The first to find it makes sure every peer has this rank's word: the item that publishes it
  // may not run now (a failed communicator skips its items), and the peers' checks need it.
  if (recordFailure(v, site, Status::kMismatch, mine, seen)) (void)publishSigEverywhere(v, mine, op, item);
  return Status::kMismatch;
}

// One thread: every peer's word against `mine`, for a consumer of every peer's data (the flagged
// exchanges check so before their first result is stored).
WEFT_HOST_DEVICE Status checkSigs(const CommView& v, uint64_t mine, uint64_t op, uint32_t item) {
  Status st = Status::kOk;
  for (int p = 1; p < v.nranks && st == Status::kOk; ++p) st = checkSig(v, (v.rank + p) % v.nranks, mine, op, item);
  return st;
}

// The whole group: every peer's word against `mine` (threads take different peers). For ops that
// send nothing a peer could check against (an empty op): its only meeting with the peers.
template <class Coop>
WEFT_HOST_DEVICE Status checkEveryPeerSig(const Coop& c, const CommView& v, uint64_t mine, uint64_t op, uint32_t item) {
  Status st = Status::kOk;
  for (int p = 1 + c.rank(); p < v.nranks && st == Status::kOk; p += c.size())
    st = checkSig(v, (v.rank + p) % v.nranks, mine, op, item);
  return c.any(st != Status::kOk) ? Status::kPeerFailed : Status::kOk;
}

// The whole group: publishes this rank's word everywhere, then checks every peer's. An op with
// nothing to exchange (count 0) runs this, so that it still meets its peers: a rank that skipped
// it could otherwise run ahead and mix the next op's data with a peer's late one.
template <class Coop>
WEFT_HOST_DEVICE Status exchangeSigs(const Coop& c, const CommView& v, uint64_t mine, uint64_t op, uint32_t item) {
  c.sync();
  const Status st = c.leader() ? publishSigEverywhere(v, mine, op, item) : Status::kOk;
  if (c.any(st != Status::kOk)) return Status::kPeerFailed;
  return checkEveryPeerSig(c, v, mine, op, item);
}

// Leader-only, after the group's stores of `bytes` at `offset` in peer's heap (0: none): the
// signal (store or add of `value` at `flagOffset`) with this rank's signature word just before it
// (mine != 0). Through the proxy the put and the signals go as one burst (postTriggers).
WEFT_HOST_DEVICE Status putSignalLeader(const CommView& v, int peer, uint64_t offset, uint64_t bytes,
                                        uint64_t flagOffset, uint64_t value, bool add, uint64_t mine,
                                        const WaitSite& site) {
  if (!viaProxy(v, peer)) {
    if (mine != 0) (void)publishSig(v, peer, mine, site);  // a store: nothing to wait for
    return signalLeaderTo(v, peer, flagOffset, value, add, site);
  }
  uint64_t w0[kBurstMax], w1[kBurstMax];  // the put, the signature word, the signal
  uint32_t n = 0;
  if (bytes != 0) {
    w0[n] = triggerWord0(TriggerKind::kPut, peer, offset);
    w1[n++] = bytes;
  }
  if (mine != 0) {
    w0[n] = triggerWord0(TriggerKind::kSignalStore, peer, v.layout.sigOffset(v.rank, sigMeet(mine)));
    w1[n++] = mine;
  }
  w0[n] = triggerWord0(add ? TriggerKind::kSignalAdd : TriggerKind::kSignalStore, peer, flagOffset);
  w1[n++] = value;
  return postTriggers(v, site, w0, w1, n);
}

// put() of `bytes` from `src` to `offset` in peer's heap, then a signal of it (store or add of
// `value` at `flagOffset`, with this rank's signature word before it where mine != 0), so that
// through the proxy the data and its signals are one message. Every
// thread gets the outcome through the proxy; on a mapped peer the leader's.
template <class Coop>
WEFT_HOST_DEVICE Status putAndSignal(const Coop& c, const CommView& v, int peer, uint64_t offset, const void* src,
                                     uint64_t bytes, uint64_t flagOffset, uint64_t value, bool add, uint64_t mine,
                                     const WaitSite& site) {
  put(c, v.at(peer, offset), src, bytes);
  c.sync();
  const Status st =
      c.leader() ? putSignalLeader(v, peer, offset, bytes, flagOffset, value, add, mine, site) : Status::kOk;
  return viaProxy(v, peer) ? c.broadcast(st) : st;
}

// The whole group, for an op whose protocol has no signal to carry its word (the flagged
// exchanges), at one item of the op: the leader publishes this rank's word everywhere (publish),
// then (check) compares every peer's, waiting for each (bounded). A difference fails the
// communicator, so every other wait of the op sees it in its stop reason, and since every op
// publishes its word, the peer finds it too. The leader's part is out of line on a GPU.
WEFT_HOST_DEVICE WEFT_OUT_OF_LINE Status itemSigsLeader(const CommView& v, uint64_t word, uint64_t op, uint32_t item,
                                                        bool publish, bool check) {
  Status st = publish ? publishSigEverywhere(v, word, op, item) : Status::kOk;
  if (st == Status::kOk && check) st = checkSigs(v, word, op, item);
  return st;
}
template <class Coop>
WEFT_HOST_DEVICE Status itemSigs(const Coop& c, const CommView& v, uint64_t word, uint64_t op, uint32_t item,
                                 bool publish, bool check) {
  const Status st = c.leader() ? itemSigsLeader(v, word, op, item, publish, check) : Status::kOk;
  return c.broadcast(st) != Status::kOk ? Status::kPeerFailed : Status::kOk;
}

// The group, at the item that publishes for an op whose protocol has no signal to carry its word
// (the flagged exchanges: the one-shot AllReduce's lines, the GEMM's route): this rank's word
// everywhere, once the item's own data has left, since nothing consumes the word on the fast path
// (the waits compare it on their slow path, flagged_exchange_device.hpp). Where every peer is
// mapped it is a store to each, which cannot fail: the group's last thread, which has the least
// of a small op to push, makes it alone, and no thread waits for it. Before the push, with a
// barrier, it was most of what the check cost the 16 KB AllReduce (docs/perf.md). Through the
// proxy the posts can fail, so the group learns how they went.
template <class Coop>
WEFT_HOST_DEVICE Status publishSigAfterData(const Coop& c, const CommView& v, uint64_t word, uint64_t op,
                                            uint32_t item) {
  if (proxyOf(v) != nullptr) return itemSigs(c, v, word, op, item, true, false);
  if (c.rank() == c.size() - 1) (void)publishSigEverywhere(v, word, op, item);
  return Status::kOk;
}

// wait() on a peer's signal, then (the leader, where the op is checked: mine != 0) the peer's word.
template <class Coop>
WEFT_HOST_DEVICE Status waitChecked(const Coop& c, const CommView& v, const uint64_t* flag, uint64_t atLeast,
                                    const WaitSite& site, uint64_t mine) {
  Status st = Status::kOk;
  if (c.leader()) {
    st = pollAtLeast(v, flag, atLeast, site);
    if (st == Status::kOk && mine != 0) st = checkSig(v, site.peer, mine, site.ticket, site.item);
  }
  return c.broadcast(st);
}

}  // namespace weft::dev
