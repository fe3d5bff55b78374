// The exchange at the heart of every one-shot op: each rank contributes a payload of line pairs
// (8 bytes each) to each peer (the same one to all, or, for the staged All-to-All, its block for
// that peer), and every rank reads what its peers sent (the reductions fold them in rank order).
// For a run of pairs [r.lo, r.hi):
//   1. push: this rank's pairs, flagged with the op's epoch, go into this rank's scratch area on
//      every peer (no fence, no signal: the flag travels with the data);
//   2. reduce: for each pair, the payloads of all ranks in rank order (the peers' from the scratch
//      as they land) are folded and finished.
// The one-shot AllReduce does both in one work item; the fused GEMV pushes from its compute items
// and reduces in later items, so that the exchange overlaps the compute of other items.
//
// Reuse without credits: ops of even and odd epoch use separate scratch areas. A sender writes a
// peer's area of parity p again at epoch e + 2 only after its own op e + 1 completed, which needed
// every peer's op-(e + 1) lines, which each peer stored after its op e (the last reader of the
// area) completed; what reuse needs is that every op of the exchange completes only once every
// peer's lines for it have landed. Stale lines carry an earlier epoch of the same parity (or
// zero), never the awaited flag. Every op that uses this exchange (the one-shot AllReduce, the
// staged All-to-All, the fused GEMV, the GEMM's route) advances the one-shot epoch
// (OpCounters::oneShotEpoch), and must send at least one pair to every peer: an empty exchange
// tells no sender anything, so a rank could run two epochs ahead.
//
// Signatures ride the flag (signature_device.hpp): a line's flag is the epoch with the op's
// signature folded in (exchangeFlag), so a line from a peer that runs the op with other arguments
// never carries the flag its consumer waits for, and nothing of it is used. One item of the op
// publishes this rank's word (no signal could carry it). The one-shot AllReduce's waits compare
// it with the peers' on their slow path (pollUntil), as other ops' waits do; the fused GEMV's
// first reduce item compares them before it reduces, and the other waits see a difference in
// their stop reason. Nothing waits for a word on the one-shot's fast path: item 0 comparing the
// words before it reduced took 16 KB from 3.95 to 5.22 us on 2 H200 (docs/design-notes.md).
#pragma once

#include "../comm_device.hpp"
#include "../ll_device.hpp"
#include "../signature_device.hpp"
#include "../vector_device.hpp"
#include "partition_device.hpp"

namespace weft::dev {

// The flag of the exchange's lines for an op of this epoch and signature (0 where the check is
// off: then the epoch's low half, as the exchange always had). sigFlagBits is a bijection, so two
// signatures never give the same flag for one epoch. A stale line in the same area carries an
// epoch of the same parity at least two behind; with another signature it carries this flag only
// if the two epochs differ, bit for bit, exactly where the signatures' products do, which for all
// but a few pairs of signatures takes more ops than a job runs. The one epoch whose flag would be
// zero, which a line nobody wrote carries, gets 1: the epoch that naturally has flag 1 is of the
// other parity, whose lines lie in the other area.
//
// The engine computes it once per op, into OpSeq::seqBase (which these ops have no other use for:
// opSeq), and the exchange reads it there (flagOf). Passed to the fused GEMV's compute items as a
// value of its own, it went into the closure their outlined streams take, and ptxas gave the
// kernel a 1384-byte stack instead of 376 (the base's), with spills in every stream.
WEFT_HOST_DEVICE uint32_t exchangeFlag(uint64_t epoch, uint32_t sig) {
  const uint32_t flag = static_cast<uint32_t>(epoch) ^ sigFlagBits(sig);
  return flag != 0 ? flag : 1u;
}
WEFT_HOST_DEVICE uint32_t flagOf(const OpSeq& seq) { return static_cast<uint32_t>(seq.seqBase); }

// Payload word k (bytes [8k, 8k + 8)) of a buffer of `bytes`, zero past its end: what pair k of an
// exchange carries.
WEFT_HOST_DEVICE uint64_t loadPayloadWord(const uint8_t* p, uint64_t bytes, uint64_t k) {
  const uint64_t at = k * kLlPayloadBytes;
  if ((reinterpret_cast<uintptr_t>(p) & 7) == 0 && at + kLlPayloadBytes <= bytes) return load8(p + at);
  uint64_t x = 0;
  for (uint64_t b = at; b < bytes && b < at + kLlPayloadBytes; ++b) x |= uint64_t{p[b]} << (8 * (b - at));
  return x;
}
// Stores payload word k into a buffer of `bytes`, none of it past the end.
WEFT_HOST_DEVICE void storePayloadWord(uint8_t* p, uint64_t bytes, uint64_t k, uint64_t x) {
  const uint64_t at = k * kLlPayloadBytes;
  if ((reinterpret_cast<uintptr_t>(p) & 7) == 0 && at + kLlPayloadBytes <= bytes) return store8(p + at, x);
  for (uint64_t b = at; b < bytes && b < at + kLlPayloadBytes; ++b) p[b] = static_cast<uint8_t>(x >> (8 * (b - at)));
}

// Where rank `sender`'s pair k lies in rank `owner`'s scratch for the op's epoch.
WEFT_HOST_DEVICE uint64_t* flaggedPair(const CommView& v, const OpSeq& seq, int owner, int sender, uint64_t k) {
  const auto parity = static_cast<uint32_t>(seq.epoch & 1);
  return reinterpret_cast<uint64_t*>(v.at(owner, v.layout.oneShotDataOffset(sender, parity)) + k * kLlPairBytes);
}

// Step 1: pairs [r.lo, r.hi) of this rank's payload (own(k) -> uint64_t), under the op's flag
// (flagOf), to ranks
// [first, first + count) counted from this one (modulo the ranks): first 1 and count nranks - 1 for
// every peer; first 0 adds this rank's own area (for a reduction that runs later, in another item).
//
// A peer reached through the host proxy gets the pairs in this rank's mirror of it, then as one
// message that the proxy stores at the peer a word at a time (TriggerKind::kDeliver): a network
// write may land a word's halves apart, which a flag in the word cannot tell.
template <class Coop, class Own>
WEFT_HOST_DEVICE Status pushFlaggedTo(const Coop& c, const CommView& v, const OpSeq& seq, Range r, int first, int count,
                                      Own&& own, uint32_t item = 0) {
  const uint32_t flag = flagOf(seq);
  for (uint64_t k = r.lo + c.rank(); k < r.hi; k += static_cast<uint64_t>(c.size())) {
    const uint64_t x = own(k);
    for (int p = first; p < first + count; ++p) {
      const int j = (v.rank + p) % v.nranks;
      llStore(flaggedPair(v, seq, j, v.rank, k), x, flag);
    }
  }
  if constexpr (!kProxyInDevice) return Status::kOk;
  if (proxyOf(v) == nullptr || r.hi <= r.lo) return Status::kOk;
  c.sync();
  Status st = Status::kOk;
  if (c.leader())
    for (int p = first; p < first + count && st == Status::kOk; ++p) {
      const int j = (v.rank + p) % v.nranks;
      if (!viaProxy(v, j)) continue;
      const uint64_t at =
          v.layout.oneShotDataOffset(v.rank, static_cast<uint32_t>(seq.epoch & 1)) + r.lo * kLlPairBytes;
      st = postTrigger(v, WaitSite{seq.op, item, j, WaitWhat::kProxyRoom}, triggerWord0(TriggerKind::kDeliver, j, at),
                       (r.hi - r.lo) * kLlPairBytes);
    }
  return c.broadcast(st);
}
template <class Coop, class Own>
WEFT_HOST_DEVICE Status pushFlagged(const Coop& c, const CommView& v, const OpSeq& seq, Range r, bool toSelf, Own&& own,
                                    uint32_t item = 0) {
  return pushFlaggedTo(c, v, seq, r, toSelf ? 0 : 1, toSelf ? v.nranks : v.nranks - 1, own, item);
}

// Step 2: for each pair, the payloads of the ranks in from(k) (a Range, clamped to the ranks;
// every rank by default) in rank order, folded by add(acc, payload) into an Acc (value-initialised
// per pair), then finish(k, acc). This rank's own payload comes from own(k), or, with
// `selfInScratch`, from its own area where pushFlagged(toSelf) left it. Lines are awaited under
// the op's flag, which carries its signature, so nothing is stored from a peer that disagrees.
//
// With kPeek > 1 a pair's lines from up to kPeek ranks are read at once, without waiting, and
// then folded in rank order, waiting only for a line not yet landed: where they all have, that is
// one memory latency per kPeek ranks, not one per rank. The fused GEMV's reduce items, which run
// after the compute items and mostly find their lines landed, peek 4 (with the warmed first slice
// it made batch 1 faster on 4 H200: docs/archive/perf-journal-2026-11.md). The one-shot AllReduce reduces
// right after it pushes, when the peers' lines have rarely landed: peeking made it slower at
// 64 KB-1 MB there, so it waits for one rank's line at a time (kPeek 1).
struct EveryRank {
  WEFT_HOST_DEVICE Range operator()(uint64_t) const { return Range{0, UINT64_MAX}; }
};
//
// kPeerCheck: whether the waits compare the peers' signature words on their slow path
// (pollUntil): the one-shot AllReduce's do, so that its check costs no wait on the fast path; the
// fused GEMV's reduction, at its register limit, checks the op once instead (its first reduce
// item) and its waits see a difference in their stop reason.
template <class Acc, int kPeek, bool kPeerCheck, class Coop, class Own, class Add, class Finish, class From = EveryRank>
WEFT_HOST_DEVICE Status reduceFlagged(const Coop& c, const CommView& v, const OpSeq& seq, uint32_t item, Range r,
                                      bool selfInScratch, Own&& own, Add&& add, Finish&& finish,
                                      From&& from = EveryRank{}) {
  const uint32_t flag = flagOf(seq);
  auto fromScratch = [&](int src) { return src != v.rank || selfInScratch; };
  auto waitFor = [&](int src, uint64_t k, uint64_t* x) {
    return llWait<kPeerCheck>(v, flaggedPair(v, seq, v.rank, src, k), flag, x,
                              WaitSite{seq.op, item, src, WaitWhat::kInboxData});
  };
  Status st = Status::kOk;
  for (uint64_t k = r.lo + c.rank(); k < r.hi && st == Status::kOk; k += static_cast<uint64_t>(c.size())) {
    Acc acc{};
    const Range f = from(k);
    const auto last = static_cast<int>(minU64(f.hi, static_cast<uint64_t>(v.nranks)));
    for (auto s0 = static_cast<int>(f.lo); s0 < last && st == Status::kOk; s0 += kPeek) {
      if constexpr (kPeek == 1) {
        uint64_t x = 0;
        if (fromScratch(s0))
          st = waitFor(s0, k, &x);
        else
          x = own(k);
        add(acc, x);
      } else {
        // Line halves, or this rank's own payload in a[i] where it is not in the scratch.
        uint64_t a[kPeek], b[kPeek];
        WEFT_UNROLL
        for (int i = 0; i < kPeek; ++i) {
          const int src = s0 + i;
          a[i] = b[i] = 0;
          if (src >= last) continue;
          if (fromScratch(src))
            llPeek(flaggedPair(v, seq, v.rank, src, k), &a[i], &b[i]);
          else
            a[i] = own(k);
        }
        WEFT_UNROLL
        for (int i = 0; i < kPeek; ++i) {
          const int src = s0 + i;
          if (src >= last || st != Status::kOk) continue;
          uint64_t x = a[i];
          if (fromScratch(src) && !llCarries(a[i], b[i], flag, &x)) st = waitFor(src, k, &x);
          add(acc, x);
        }
      }
    }
    if (st == Status::kOk) finish(k, acc);
  }
  // The peers' lines are in: what this rank's own sends of the exchange read before they left is
  // behind it too (ThreadSanitizer's model of causality through another process, primitives_device.hpp).
  prim::crossProcessAcquire();
  // The thread that failed recorded why; the whole group reports the communicator as failed.
  return c.any(st != Status::kOk) ? Status::kPeerFailed : Status::kOk;
}

}  // namespace weft::dev
