// Sum AllReduce, reduce-scatter + all-gather through the persistent engine.
//
// Rank r owns shard r. Work item t (one per tile of a shard) on rank r:
//   1. for every peer j: put tile t of shard j of r's input into j's inbox slot from r, signal it
//      (the slot is reused only after j credits it back);
//   2. wait for every peer's tile t of shard r, sum in float32 in rank order with r's own tile,
//      write the result to r's output, credit the inbox slots back, and put the result straight
//      into every peer's output (zero copy), adding 1 to their `gathered[r]` counter.
// The last item waits until every peer's shard has been gathered into r's output.
// In place is safe: a peer writes into r's output only after r's input tile reached its inbox.
// Signatures (signature_device.hpp): every inbox flag carries the sender's word just before it,
// and the owner compares it once the flag is in, before it reads the tile or writes any output;
// an empty op (no tiles) exchanges the words alone.
#pragma once

#include "../../comm_device.hpp"
#include "../../dtype_device.hpp"
#include "../../signature_device.hpp"
#include "../partition_device.hpp"

namespace weft::dev {

// Up to this many ranks sum through the vectorised path; more fall back to one element at a time.
constexpr int kMaxSumSources = 16;

struct AllReduceOp {
  WEFT_HOST_DEVICE static uint64_t tilesPerShard(uint64_t count, uint32_t nranks, uint32_t esize, uint64_t tileElems) {
    return ceilDiv(shardElems(count, nranks, vectorElems(esize)), tileElems);
  }
  // Signal counters (inbox sequence, gathered tiles) advance by this much per op on every pair.
  WEFT_HOST_DEVICE static uint64_t seqAdvance(uint64_t count, uint32_t nranks, uint32_t esize, uint64_t tileElems) {
    return tilesPerShard(count, nranks, esize, tileElems);
  }
  WEFT_HOST_DEVICE static uint32_t numItems(uint64_t count, uint32_t nranks, uint32_t esize, uint64_t tileElems) {
    return static_cast<uint32_t>(tilesPerShard(count, nranks, esize, tileElems) + 1);
  }

  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                     uint32_t item) {
    const auto dt = static_cast<DType>(d.dtype);
    const uint32_t es = dtypeSize(dt);
    const uint64_t tps = tilesPerShard(d.count, v.nranks, es, d.grain);
    const uint64_t sig = d.sig ? sigWord(runningOpMeet(), d.sig) : 0;
    if (item == tps) {
      if (tps == 0) {
        const Status st = exchangeSigs(c, v, sigWord(runningOpMeet(), d.sig), seq.op, item);
        if (st != Status::kOk) return st;
      }
      return waitEveryPeer(c, v, PeerSignal::kGathered, seq.seqBase + tps, seq.op, item, WaitWhat::kGather);
    }

    const HeapLayout& L = v.layout;
    const int me = v.rank;
    const uint64_t q = seq.seqBase + item + 1;  // channel sequence number of this tile
    const uint32_t slot = static_cast<uint32_t>((q - 1) % L.inboxSlots);
    const auto* send = reinterpret_cast<const uint8_t*>(d.send);

    for (int p = 1; p < v.nranks; ++p) {
      const int j = (me + p) % v.nranks;
      Range r = tileRange(shardRange(d.count, v.nranks, vectorElems(es), j), d.grain, item);
      if (q > L.inboxSlots) {
        WaitSite site{seq.op, item, j, WaitWhat::kInboxCredit};
        Status st = wait(c, v, v.signal(me, L.inboxCreditOffset(j, slot)), q - L.inboxSlots, site);
        if (st != Status::kOk) return st;
      }
      const WaitSite room{seq.op, item, j, WaitWhat::kProxyRoom};
      const Status st = putAndSignal(c, v, j, L.inboxDataOffset(me, slot), send + r.lo * es, r.size() * es,
                                     L.inboxFlagOffset(me, slot), q, /*add=*/false, sig, room);
      if (st != Status::kOk) return st;
    }
    if (c.leader()) noteOwnSig(v, sig);  // every peer has the word (signature_device.hpp)

    Range mine = tileRange(shardRange(d.count, v.nranks, vectorElems(es), me), d.grain, item);
    for (int p = 1; p < v.nranks; ++p) {
      const int src = (me + p) % v.nranks;
      WaitSite site{seq.op, item, src, WaitWhat::kInboxData};
      Status st = waitChecked(c, v, v.signal(me, L.inboxFlagOffset(src, slot)), q, site, sig);
      if (st != Status::kOk) return st;
    }
    uint8_t* out = v.at(me, d.recv);
    // Sources in rank order, so that every rank's shard is summed the same way.
    const uint8_t* srcs[kMaxSumSources];
    const int nsrc = v.nranks <= kMaxSumSources ? v.nranks : 0;
    for (int src = 0; src < nsrc; ++src)
      srcs[src] = src == me ? send + mine.lo * es : v.at(me, L.inboxDataOffset(src, slot));
    if (nsrc) {
      sumTile(c, dt, out + mine.lo * es, srcs, nsrc, mine.size());
    } else {
      for (uint64_t i = c.rank(); i < mine.size(); i += c.size()) {
        float acc = 0.f;
        for (int src = 0; src < v.nranks; ++src) {
          const void* in = src == me ? send + mine.lo * es : v.at(me, L.inboxDataOffset(src, slot));
          acc += loadAsFloat(in, i, dt);
        }
        storeFromFloat(out + mine.lo * es, i, dt, acc);
      }
    }
    c.sync();
    for (int p = 1; p < v.nranks; ++p) {
      const int j = (me + p) % v.nranks;
      const WaitSite room{seq.op, item, j, WaitWhat::kProxyRoom};
      Status st =
          c.leader() ? signalLeaderTo(v, j, L.inboxCreditOffset(me, slot), q, /*add=*/false, room) : Status::kOk;
      st = uniform(c, v, st);
      if (st == Status::kOk)
        st = putAndSignal(c, v, j, d.recv + mine.lo * es, out + mine.lo * es, mine.size() * es, L.gatheredOffset(me),
                          uint64_t{1}, /*add=*/true, 0, room);
      if (st != Status::kOk) return st;
    }
    return Status::kOk;
  }
};

}  // namespace weft::dev
