// The exchange at the heart of every one-shot op: each rank contributes a payload of line pairs
// (8 bytes each), every rank receives all ranks' payloads and reduces them itself, in rank order.
// Work item `item` owns the pairs [r.lo, r.hi):
//   1. it stores its pairs of this rank's payload, flagged with the op's epoch, into this rank's
//      scratch area on every peer (no fence, no signal: the flag travels with the data);
//   2. for each pair it takes the payloads of all ranks in rank order (its own from `own`, the
//      peers' from its scratch as they land), hands them to `add`, then calls `finish`.
//
// Reuse without credits: ops of even and odd epoch use separate scratch areas. A sender writes a
// peer's area of parity p again at epoch e + 2 only after its own op e + 1 completed, which needed
// every peer's op-(e + 1) lines, which each peer stored after its op e (the last reader of the
// area) completed. Stale lines carry epoch e - 2 (or zero), never the awaited flag. Every op that
// uses this exchange advances the one-shot epoch (OpCounters::oneShotEpoch).
#pragma once

#include "../comm_device.hpp"
#include "../ll_device.hpp"
#include "partition_device.hpp"

namespace weft::dev {

// own(k) -> uint64_t payload of pair k; add(acc, payload) folds one rank's payload into an Acc
// (value-initialised per pair); finish(k, acc) consumes the sum.
template <class Acc, class Coop, class Own, class Add, class Finish>
WEFT_HOST_DEVICE Status exchangeFlagged(const Coop& c, const CommView& v, const OpSeq& seq, uint32_t item, Range r,
                                        Own&& own, Add&& add, Finish&& finish) {
  const HeapLayout& L = v.layout;
  const int me = v.rank;
  const auto parity = static_cast<uint32_t>(seq.epoch & 1);
  const auto flag = static_cast<uint32_t>(seq.epoch);
  const auto stride = static_cast<uint64_t>(c.size());
  auto pairAt = [&](int owner, int sender, uint64_t k) {
    return reinterpret_cast<uint64_t*>(v.at(owner, L.oneShotDataOffset(sender, parity)) + k * kLlPairBytes);
  };

  for (uint64_t k = r.lo + c.rank(); k < r.hi; k += stride) {
    const uint64_t x = own(k);
    for (int p = 1; p < v.nranks; ++p) llStore(pairAt((me + p) % v.nranks, me, k), x, flag);
  }

  Status st = Status::kOk;
  for (uint64_t k = r.lo + c.rank(); k < r.hi && st == Status::kOk; k += stride) {
    Acc acc{};
    for (int src = 0; src < v.nranks && st == Status::kOk; ++src) {
      uint64_t x = 0;
      if (src == me)
        x = own(k);
      else
        st = llWait(v, pairAt(me, src, k), flag, &x, WaitSite{seq.op, item, src, WaitWhat::kInboxData});
      add(acc, x);
    }
    if (st == Status::kOk) finish(k, acc);
  }
  // The thread that failed recorded why; the whole group reports the communicator as failed.
  return c.any(st != Status::kOk) ? Status::kPeerFailed : Status::kOk;
}

}  // namespace weft::dev
