// One-shot sum AllReduce, for small inputs where latency, not bandwidth, is the cost: every rank
// pushes its whole input into its own scratch area of every peer (one put, one signal per pair),
// then sums all inputs locally, in rank order and float32, into its own output. One work item.
//
// Per pair the scratch holds one op at a time: before overwriting it for one-shot op e, a sender
// waits for the receiver's credit for op e - 1. Peers never touch this rank's output, so in place
// needs nothing more.
#pragma once

#include "../comm_device.hpp"
#include "../vector_device.hpp"
#include "allreduce_device.hpp"

namespace weft::dev {

struct AllReduceOneShotOp {
  WEFT_HOST_DEVICE static uint32_t numItems() { return 1; }

  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, uint64_t ticket,
                                     uint32_t item) {
    const HeapLayout& L = v.layout;
    const int me = v.rank;
    const auto dt = static_cast<DType>(d.dtype);
    const uint64_t bytes = d.count * dtypeSize(dt);
    const auto* send = reinterpret_cast<const uint8_t*>(d.send);
    for (int p = 1; p < v.nranks; ++p) {
      const int j = (me + p) % v.nranks;
      Status st = wait(c, v, v.signal(me, L.peerSignalOffset(PeerSignal::kOneShotCredit, j)), d.epoch - 1,
                       WaitSite{ticket, item, j, WaitWhat::kInboxCredit});
      if (st != Status::kOk) return st;
      put(c, v.at(j, L.oneShotDataOffset(me)), send, bytes);
      signalStore(c, v.signal(j, L.peerSignalOffset(PeerSignal::kOneShotFlag, me)), d.epoch);
    }
    Status st = waitEveryPeer(c, v, PeerSignal::kOneShotFlag, d.epoch, ticket, item, WaitWhat::kInboxData);
    if (st != Status::kOk) return st;
    const uint8_t* srcs[kMaxSumSources];
    for (int r = 0; r < v.nranks; ++r) srcs[r] = r == me ? send : v.at(me, L.oneShotDataOffset(r));
    sumTile(c, dt, v.at(me, d.recv), srcs, v.nranks, d.count);
    c.sync();
    if (c.leader())
      for (int p = 1; p < v.nranks; ++p) {
        const int src = (me + p) % v.nranks;
        releaseStore(v.signal(src, L.peerSignalOffset(PeerSignal::kOneShotCredit, me)), d.epoch);
      }
    return Status::kOk;
  }
};

}  // namespace weft::dev
