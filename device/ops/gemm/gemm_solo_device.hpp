// The GEMM + All-to-All's blas path on a communicator of one rank. Its All-to-All is a copy to
// itself: every row of the product goes to the same row of recv, in order (the only source's
// block, at row 0). So nothing is published or waited for, and nothing counts rows: each item
// checks the two inputs that can be wrong on one rank (send_counts[0] must be `tokens`, and
// `tokens` must fit recv_capacity; the other checks of gemm_route_device.hpp compare ranks) and,
// where they are sound, copies its contiguous share of the product; the last item records the
// failure, or fills recv_counts. The route's protocol (a flagged row to itself, read back before
// the first store, each tile's count and release) cost this op three times what the copy does.
#pragma once

#include "../../comm_device.hpp"
#include "../../vector_device.hpp"
#include "gemm_alltoall_device.hpp"

namespace weft::dev {

struct GemmSoloRoute {
  // Why the op cannot move data, as readRoute's verdict would say it on one rank.
  WEFT_HOST_DEVICE static RouteVerdict verdictOf(const GemmArgs& g) {
    const int64_t sent = g.sendCounts[0], tokens = static_cast<int64_t>(g.tokens);
    const auto capacity = static_cast<int64_t>(g.capacity);
    if (sent != tokens) return RouteVerdict{WaitWhat::kSendCounts, 0, g.capacity, static_cast<uint64_t>(sent)};
    if (tokens > capacity) return RouteVerdict{WaitWhat::kCapacity, 0, g.capacity, g.tokens};
    return RouteVerdict{};
  }

  // Item `item` of d.nitems copies the item-th share of the product's bytes (16-byte vectors);
  // the last one also reports.
  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                     uint32_t item) {
    const GemmArgs g = GemmAllToAllOp::args(d);
    // Read by the leader: every thread of every block loading the same word queues on one line.
    const RouteVerdict verdict = c.template fromLeader<RouteVerdict>([&] { return verdictOf(g); });
    if (verdict.ok())
      copyShare(c, g.a, v.at(v.rank, d.recv), g.tokens * g.h * dtypeSize(static_cast<DType>(d.dtype)), item, d.nitems);
    if (item + 1 != d.nitems) return Status::kOk;
    if (!verdict.ok()) {
      if (c.leader())
        recordFailure(v, WaitSite{seq.op, item, verdict.rank, verdict.what}, Status::kBadInput, verdict.expected,
                      verdict.observed);
      return Status::kBadInput;
    }
    if (g.recvCounts && c.leader()) g.recvCounts[0] = static_cast<int64_t>(g.tokens);
    return Status::kOk;
  }

 private:
  // Vectors in flight per thread: a block's 256 threads move a full tile's 64 KB in one round.
  static constexpr int kUnroll = 16;

  template <class Coop>
  WEFT_HOST_DEVICE static void copyShare(const Coop& c, const uint8_t* from, uint8_t* to, uint64_t bytes, uint32_t item,
                                         uint32_t items) {
    const uint64_t vectors = bytes / kVecBytes;  // h is a multiple of 8 two-byte elements
    const uint64_t lo = vectors * item / items, hi = vectors * (item + 1) / items;
    const auto step = static_cast<uint64_t>(c.size());
    for (uint64_t i0 = lo + static_cast<uint64_t>(c.rank()); i0 < hi; i0 += step * kUnroll) {
      Vec16 x[kUnroll];
      WEFT_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t i = i0 + static_cast<uint64_t>(u) * step;
        if (i < hi) x[u] = load16(from + i * kVecBytes);
      }
      WEFT_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t i = i0 + static_cast<uint64_t>(u) * step;
        if (i < hi) store16(to + i * kVecBytes, x[u]);
      }
    }
  }
};

}  // namespace weft::dev
