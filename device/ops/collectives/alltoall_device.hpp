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
#pragma once

#include "../../comm_device.hpp"
#include "../../dtype_device.hpp"
#include "../../signature_device.hpp"
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

  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                     uint32_t item) {
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
          if (mine != 0) st = publishSig(v, j, mine, site);
          if (st == Status::kOk) st = signalLeaderTo(v, j, L.readyFromOffset(me), seq.epoch, false, site);
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
    st = putTo(c, v, j, dst, src, r.size() * es, site);
    if (st != Status::kOk) return st;
    return signalTo(c, v, j, L.arrivedOffset(me), uint64_t{1}, /*add=*/true, site);
  }
};

}  // namespace weft::dev
