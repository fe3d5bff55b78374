// Where the rows of a GEMM + All-to-All go. Every rank publishes one row of nranks + 3 words
// through the flagged exchange (flagged_exchange_device.hpp): its send_counts, its receive
// capacity, a word of flags saying whether its own inputs were sound, and the heap offset of its
// recv (peers address recv by their own offset, so all must be the same). From all ranks' rows
// each rank works out, with nothing else exchanged:
//   - the verdict, the same on every rank: the op moves data only if every rank's inputs are sound
//     and no rank is sent more rows than its capacity;
//   - for each destination d, where this rank's block starts in d's output (the rows sources
//     before it send to d) and how many rows it sends there;
//   - how many rows each source sends to this rank (recv_counts).
// Seeing a rank's row also tells a sender that the rank has started this op, so its output is no
// longer read by anything before it (the "ready" of the other All-to-Alls).
#pragma once

#include "../../comm_device.hpp"
#include "../flagged_exchange_device.hpp"

namespace weft::dev {

// Flags word of a published row.
constexpr uint64_t kRouteBadCounts = 1;   // send_counts has a negative entry or does not sum to tokens
constexpr uint64_t kRouteBadExperts = 2;  // expert_offsets is not non-decreasing up to tokens

// Ranks the op supports: the route's words must fit group-shared memory (kCoopFloats).
constexpr int kRouteMaxRanks = 256;

// Words of a published row: nranks counts, then these.
// kRouteSig: the rank's op signature (signature_device.hpp; 0 where the check is off).
constexpr int kRouteCapacity = 0, kRouteFlags = 1, kRouteRecv = 2, kRouteSig = 3, kRouteExtra = 4;

// This rank's route in group-shared memory: kRouteWords(nranks) int64 words.
struct RouteView {
  int64_t* words;
  int nranks;
  WEFT_HOST_DEVICE int64_t* base() const { return words; }                // [d] first row in d's output
  WEFT_HOST_DEVICE int64_t* mine() const { return words + nranks; }       // [d] rows this rank sends to d
  WEFT_HOST_DEVICE int64_t* total() const { return words + 2 * nranks; }  // [d] rows d receives
  WEFT_HOST_DEVICE int64_t* cap() const { return words + 3 * nranks; }    // [d] d's capacity
  WEFT_HOST_DEVICE int64_t* fault() const { return words + 4 * nranks; }  // [d] what is wrong with d's input
  WEFT_HOST_DEVICE int64_t* from() const { return words + 5 * nranks; }   // [d] rows d sends to this rank
  WEFT_HOST_DEVICE int64_t* start() const { return words + 6 * nranks; }  // [d] first row of `a` going to d; [n]
  // The rank whose block of `a` holds row `row` (< start()[nranks]).
  WEFT_HOST_DEVICE int destOf(int64_t row) const {
    int d = 0;
    while (d + 1 < nranks && start()[d + 1] <= row) ++d;
    return d;
  }
};
WEFT_HOST_DEVICE constexpr int routeWords(int nranks) { return 7 * nranks + 1; }

// Why the op cannot move data (the same on every rank), for the failure record.
struct RouteVerdict {
  WaitWhat what = WaitWhat::kNone;  // kSignature, kSendCounts, kExpertOffsets, kCapacity or kRecvOffset
  int32_t rank = -1;                // the rank whose input is at fault (the lowest, if several)
  uint64_t expected = 0;            // kCapacity: the capacity; kRecvOffset: rank 0's offset; kSignature: this rank's
  uint64_t observed = 0;            // kCapacity: the rows it would receive; kRecvOffset: its offset; kSignature: its
  WEFT_HOST_DEVICE bool ok() const { return what == WaitWhat::kNone; }
};

WEFT_HOST_DEVICE uint64_t* routePair(const CommView& v, const OpSeq& seq, int sender, int k) {
  return flaggedPair(v, seq, v.rank, sender, static_cast<uint64_t>(k));
}

// Reads every rank's row (waiting, bounded, for those not there yet) into `r` and returns the
// verdict to every thread. Thread d sums column d.
template <class Coop>
WEFT_HOST_DEVICE Status readRoute(const Coop& c, const CommView& v, const OpSeq& seq, uint32_t item, const RouteView& r,
                                  RouteVerdict* verdict) {
  const int n = v.nranks;
  const uint32_t flag = flagOf(seq);
  Status st = Status::kOk;
  auto get = [&](int sender, int k) {
    uint64_t x = 0;
    if (st == Status::kOk)
      st = llWait(v, routePair(v, seq, sender, k), flag, &x, WaitSite{seq.op, item, sender, WaitWhat::kCounts});
    return static_cast<int64_t>(x);
  };
  const int64_t sigMine = get(v.rank, n + kRouteSig);
  for (int d = c.rank(); d < n; d += c.size()) {
    int64_t total = 0, base = 0;
    for (int i = 0; i < n; ++i) {
      const int64_t x = get(i, d);
      total += x;
      if (i < v.rank) base += x;
      if (i == v.rank) r.mine()[d] = x;
    }
    r.base()[d] = base;
    r.total()[d] = total;
    r.cap()[d] = get(d, n + kRouteCapacity);
    const int64_t flags = get(d, n + kRouteFlags);
    const int64_t recv = get(d, n + kRouteRecv), recv0 = get(0, n + kRouteRecv);
    r.from()[d] = get(d, v.rank);
    const int64_t sig = get(d, n + kRouteSig);
    r.fault()[d] = static_cast<int64_t>(sig != sigMine                                   ? WaitWhat::kSignature
                                        : flags & static_cast<int64_t>(kRouteBadCounts)  ? WaitWhat::kSendCounts
                                        : flags & static_cast<int64_t>(kRouteBadExperts) ? WaitWhat::kExpertOffsets
                                        : recv != recv0                                  ? WaitWhat::kRecvOffset
                                        : total > r.cap()[d]                             ? WaitWhat::kCapacity
                                                                                         : WaitWhat::kNone);
    if (sig != sigMine) {  // the verdict's numbers for this fault
      r.total()[d] = sig;
      r.cap()[d] = sigMine;
    } else if (recv != recv0) {
      r.total()[d] = recv;
      r.cap()[d] = recv0;
    }
  }
  if (c.any(st != Status::kOk)) return Status::kPeerFailed;
  prim::crossProcessAcquire();
  if (c.leader()) {
    int64_t s = 0;
    for (int d = 0; d < n; ++d) {
      r.start()[d] = s;
      s += r.mine()[d];
    }
    r.start()[n] = s;
  }
  c.sync();
  // Ranks that disagree on the op come first: every rank sees some rank differ from it, so all
  // report the disagreement (each naming the lowest rank that differs from it).
  *verdict = RouteVerdict{};
  for (int d = 0; d < n; ++d)
    if (r.fault()[d] == static_cast<int64_t>(WaitWhat::kSignature)) {
      *verdict =
          RouteVerdict{WaitWhat::kSignature, d, static_cast<uint64_t>(r.cap()[d]), static_cast<uint64_t>(r.total()[d])};
      return Status::kOk;
    }
  for (int d = 0; d < n; ++d)
    if (r.fault()[d] != 0) {
      *verdict = RouteVerdict{static_cast<WaitWhat>(r.fault()[d]), d, static_cast<uint64_t>(r.cap()[d]),
                              static_cast<uint64_t>(r.total()[d])};
      break;
    }
  return Status::kOk;
}

}  // namespace weft::dev
