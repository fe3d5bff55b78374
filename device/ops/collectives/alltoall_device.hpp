// All-to-All by direct stores into the receivers' outputs (zero copy).
//
// Item 0 tells every peer that this rank's output is ready for this op (readyFrom[me] = epoch):
// a sender must not overwrite an output the receiver's stream may still be reading from the
// previous op. Items 1..nranks*tiles move one tile of one block each, remote blocks first in
// rotating order so the ranks do not all hit the same receiver, this rank's own block last; each
// remote tile adds 1 to the receiver's arrived[me]. The last item waits for every peer's tiles.
// Signatures (signature_device.hpp): item 0 stores this rank's word just before each ready signal;
// a sender compares the receiver's word after acquiring its ready signal, and this rank's own
// block waits for every peer's word, so nothing is stored where a peer disagrees. An empty op
// compares every peer's word in its last item.
//
// Staged (OpDesc args.allToAll.staged, small blocks through the host proxy): the ready signal and
// then the data are two trips through both ranks' proxies in turn, so there the blocks go as the
// one-shot exchange's flagged pairs instead (flagged_exchange_device.hpp): each rank's block for
// peer j into its area of j's scratch, one trip, no signal; the exchange's epochs keep the areas
// safe to reuse, and the flags carry the op's signature. Each rank then copies what lands into
// its output. The op then takes the one-shot epoch, not the All-to-All's (engine_device.hpp).
#pragma once

#include "../../comm_device.hpp"
#include "../../dtype_device.hpp"
#include "../../signature_device.hpp"
#include "../flagged_exchange_device.hpp"
#include "../partition_device.hpp"

namespace weft::dev {

struct AllToAllOp {
  WEFT_HOST_DEVICE static uint64_t tilesPerBlock(uint64_t countPerRank, uint64_t tileElems) {
    return ceilDiv(countPerRank, tileElems);
  }
  WEFT_HOST_DEVICE static uint64_t seqAdvance(uint64_t countPerRank, uint64_t tileElems) {
    return tilesPerBlock(countPerRank, tileElems);
  }
  WEFT_HOST_DEVICE static uint32_t numItems(uint64_t countPerRank, uint32_t nranks, uint64_t tileElems) {
    return static_cast<uint32_t>(2 + nranks * tilesPerBlock(countPerRank, tileElems));
  }

  // Staged: at least one pair per item, as the one-shot AllReduce's items (a thread block's worth).
  static constexpr uint64_t kStagedPairsPerItem = 256;
  static constexpr uint32_t kStagedMaxItems = 256;
  WEFT_HOST_DEVICE static uint32_t stagedItems(uint64_t blockBytes) {
    const uint64_t n = ceilDiv(ceilDiv(blockBytes, kLlPayloadBytes), kStagedPairsPerItem);
    return n == 0 ? 1u : n > kStagedMaxItems ? kStagedMaxItems : static_cast<uint32_t>(n);
  }

  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                     uint32_t item) {
    // Only a communicator with proxy peers stages (runtime/comm_ops.cpp), and it launches the
    // proxied kernels: the direct ones carry none of the staged code, and refuse such an op.
    if (d.args.allToAll.staged) {
      if constexpr (kProxyInDevice)
        return runStaged(c, v, d, seq, item);
      else
        return Status::kBadInput;
    }
    const HeapLayout& L = v.layout;
    const int me = v.rank;
    const uint64_t tpb = tilesPerBlock(d.count, d.grain);
    // Empty ops exchange words whether checked or not: they are their only meeting.
    const uint64_t mine = d.sig != 0 || tpb == 0 ? sigWord(runningOpMeet(), d.sig) : 0;
    if (item == 0) {
      c.sync();
      Status st = Status::kOk;
      if (c.leader()) {
        for (int j = 0; j < v.nranks && st == Status::kOk; ++j) {
          if (j == me) continue;
          const WaitSite site{seq.op, item, j, WaitWhat::kProxyRoom};
          st = putSignalLeader(v, j, 0, 0, L.readyFromOffset(me), seq.epoch, /*add=*/false, mine, site);
        }
        if (st == Status::kOk) noteOwnSig(v, mine);
      }
      return uniform(c, v, st);
    }
    if (item == 1 + v.nranks * tpb) {
      if (tpb == 0) {
        const Status st = checkEveryPeerSig(c, v, mine, seq.op, item);
        if (st != Status::kOk) return st;
      }
      return waitEveryPeer(c, v, PeerSignal::kArrived, seq.seqBase + tpb, seq.op, item, WaitWhat::kArrival);
    }

    const uint64_t k = item - 1;
    const int j = static_cast<int>((me + 1 + k / tpb) % v.nranks);
    const uint64_t es = dtypeSize(static_cast<DType>(d.dtype));
    const Range r = tileRange(Range{0, d.count}, d.grain, k % tpb);
    const auto* src = reinterpret_cast<const uint8_t*>(d.send) + (j * d.count + r.lo) * es;
    const uint64_t dst = d.recv + (me * d.count + r.lo) * es;
    if (j == me) {
      if (mine != 0)
        if (const Status st = checkEveryPeerSig(c, v, mine, seq.op, item); st != Status::kOk) return st;
      put(c, v.at(j, dst), src, r.size() * es);
      return Status::kOk;
    }
    WaitSite site{seq.op, item, j, WaitWhat::kReady};
    Status st = waitChecked(c, v, v.signal(me, L.readyFromOffset(j)), seq.epoch, site, mine);
    if (st != Status::kOk) return st;
    site.what = WaitWhat::kProxyRoom;
    return putAndSignal(c, v, j, dst, src, r.size() * es, L.arrivedOffset(me), uint64_t{1}, /*add=*/true, 0, site);
  }

 private:
  // Item `item` of d.nitems moves its share of every block's payload words: out to each peer,
  // then each peer's from the scratch into place as it lands, then its own block's. The host stages only
  // blocks that are not empty and fit the scratch (runtime/comm_ops.cpp).
  template <class Coop>
  WEFT_HOST_DEVICE static Status runStaged(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                           uint32_t item) {
    const uint64_t block = d.count * dtypeSize(static_cast<DType>(d.dtype));
    const uint64_t words = ceilDiv(block, kLlPayloadBytes), per = ceilDiv(words, d.nitems);
    const Range r{minU64(words, per * item), minU64(words, per * (item + 1))};
    const auto* send = reinterpret_cast<const uint8_t*>(d.send);
    uint8_t* out = v.at(v.rank, d.recv);
    const auto me = static_cast<uint64_t>(v.rank);
    for (int p = 1; p < v.nranks; ++p) {
      const uint8_t* from = send + static_cast<uint64_t>((v.rank + p) % v.nranks) * block;
      const Status st = pushFlaggedTo(
          c, v, seq, r, p, 1, [&](uint64_t k) { return loadPayloadWord(from, block, k); }, item);
      if (st != Status::kOk) return st;
    }
    if (item == 0 && d.sig != 0)
      if (const Status st = publishSigAfterData(c, v, sigWord(runningOpMeet(), d.sig), seq.op, item); st != Status::kOk)
        return st;
    struct Word {
      uint64_t x;
    };
    for (int p = 1; p < v.nranks; ++p) {
      const int src = (v.rank + p) % v.nranks;
      uint8_t* into = out + static_cast<uint64_t>(src) * block;
      const Status st = reduceFlagged<Word, 1, true>(
          c, v, seq, item, r, false, [](uint64_t) { return uint64_t{0}; }, [](Word& w, uint64_t x) { w.x = x; },
          [&](uint64_t k, const Word& w) { storePayloadWord(into, block, k, w.x); },
          [&](uint64_t) {
            return Range{static_cast<uint64_t>(src), static_cast<uint64_t>(src) + 1};
          });
      if (st != Status::kOk) return st;
    }
    // This rank's own block last: every peer's words landed under this op's flag, which carries
    // its signature, so every peer agrees (with two ranks, a rank that disagrees writes none of
    // its output; with more, ranks that agree store each other's blocks before the op fails).
    for (uint64_t k = r.lo + c.rank(); k < r.hi; k += static_cast<uint64_t>(c.size()))
      storePayloadWord(out + me * block, block, k, loadPayloadWord(send + me * block, block, k));
    return Status::kOk;
  }
};

}  // namespace weft::dev
