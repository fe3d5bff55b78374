// One-shot sum AllReduce, for small inputs where latency, not bandwidth, is the cost. The input is
// cut into line pairs of 8 bytes (ll_device.hpp), and work item i owns a contiguous run of them:
//   1. it stores its pairs of this rank's input, flagged with the op's epoch, into this rank's
//      scratch area on every peer (no fence, no signal: the flag travels with the data);
//   2. it waits for every peer's pairs to land in its own scratch, sums them with its own input in
//      rank order and float32, and writes its own output. Peers never touch this rank's output,
//      so in place needs nothing more; each thread reads its input pairs before it writes them.
//
// Reuse without credits: ops of even and odd epoch use separate scratch areas. A sender writes a
// peer's area of parity p again at epoch e + 2 only after its own op e + 1 completed, which needed
// every peer's op-(e + 1) lines, which each peer stored after its op e (the last reader of the
// area) completed. Stale lines carry epoch e - 2 (or zero), never the awaited flag.
#pragma once

#include "../comm_device.hpp"
#include "../ll_device.hpp"
#include "../vector_device.hpp"
#include "partition_device.hpp"

namespace weft::dev {

struct AllReduceOneShotOp {
  static constexpr uint64_t kPairsPerItem = 256;  // at least: one pair per thread of a 256-thread block
  static constexpr uint32_t kMaxItems = 64;

  WEFT_HOST_DEVICE static uint64_t pairs(uint64_t bytes) { return ceilDiv(bytes, kLlPayloadBytes); }
  WEFT_HOST_DEVICE static uint32_t numItems(uint64_t bytes) {
    const uint64_t n = ceilDiv(pairs(bytes), kPairsPerItem);
    return n == 0 ? 1u : n > kMaxItems ? kMaxItems : static_cast<uint32_t>(n);
  }
  // The line pairs work item `item` of `nitems` owns.
  WEFT_HOST_DEVICE static Range itemPairs(uint64_t bytes, uint32_t nitems, uint32_t item) {
    const uint64_t per = ceilDiv(pairs(bytes), nitems);
    return Range{minU64(pairs(bytes), per * item), minU64(pairs(bytes), per * (item + 1))};
  }

  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                     uint32_t item) {
    switch (static_cast<DType>(d.dtype)) {
      case DType::kFloat32:
        return runAs<Coop, DType::kFloat32>(c, v, d, seq, item);
      case DType::kFloat16:
        return runAs<Coop, DType::kFloat16>(c, v, d, seq, item);
      default:
        return runAs<Coop, DType::kBFloat16>(c, v, d, seq, item);
    }
  }

 private:
  // Bytes [8k, 8k + 8) of a buffer of `bytes`, zero past its end.
  WEFT_HOST_DEVICE static uint64_t loadPair(const uint8_t* p, uint64_t bytes, uint64_t k) {
    const uint64_t at = k * kLlPayloadBytes;
    if ((reinterpret_cast<uintptr_t>(p) & 7) == 0 && at + kLlPayloadBytes <= bytes) return load8(p + at);
    uint64_t x = 0;
    for (uint64_t b = at; b < bytes && b < at + kLlPayloadBytes; ++b) x |= uint64_t{p[b]} << (8 * (b - at));
    return x;
  }
  WEFT_HOST_DEVICE static void storePair(uint8_t* p, uint64_t bytes, uint64_t k, uint64_t x) {
    const uint64_t at = k * kLlPayloadBytes;
    if ((reinterpret_cast<uintptr_t>(p) & 7) == 0 && at + kLlPayloadBytes <= bytes) return store8(p + at, x);
    for (uint64_t b = at; b < bytes && b < at + kLlPayloadBytes; ++b) p[b] = static_cast<uint8_t>(x >> (8 * (b - at)));
  }
  WEFT_HOST_DEVICE static uint64_t* pairAt(const CommView& v, int owner, uint64_t scratch, uint64_t k) {
    return reinterpret_cast<uint64_t*>(v.at(owner, scratch) + k * kLlPairBytes);
  }

  template <class Coop, DType T>
  WEFT_HOST_DEVICE static Status runAs(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                       uint32_t item) {
    const HeapLayout& L = v.layout;
    const int me = v.rank;
    const uint64_t bytes = d.count * dtypeSize(T);
    const auto* send = reinterpret_cast<const uint8_t*>(d.send);
    uint8_t* out = v.at(me, d.recv);
    const uint32_t parity = static_cast<uint32_t>(seq.epoch & 1);
    const auto flag = static_cast<uint32_t>(seq.epoch);
    const Range r = itemPairs(bytes, d.nitems, item);
    const uint64_t stride = static_cast<uint64_t>(c.size());

    for (uint64_t k = r.lo + c.rank(); k < r.hi; k += stride) {
      const uint64_t x = loadPair(send, bytes, k);
      for (int p = 1; p < v.nranks; ++p) {
        const int j = (me + p) % v.nranks;
        llStore(pairAt(v, j, L.oneShotDataOffset(me, parity), k), x, flag);
      }
    }

    Status st = Status::kOk;
    for (uint64_t k = r.lo + c.rank(); k < r.hi && st == Status::kOk; k += stride) {
      float acc[8] = {};
      for (int src = 0; src < v.nranks && st == Status::kOk; ++src) {
        Vec16 x{};
        uint64_t pair = 0;
        if (src == me)
          pair = loadPair(send, bytes, k);
        else
          st = llWait(v, pairAt(v, me, L.oneShotDataOffset(src, parity), k), flag, &pair,
                      WaitSite{seq.op, item, src, WaitWhat::kInboxData});
        x.w[0] = static_cast<uint32_t>(pair);
        x.w[1] = static_cast<uint32_t>(pair >> 32);
        accumulate<T>(acc, x);
      }
      const Vec16 sum = pack<T>(acc);
      if (st == Status::kOk) storePair(out, bytes, k, sum.w[0] | (uint64_t{sum.w[1]} << 32));
    }
    // The thread that failed recorded why; the whole group reports the communicator as failed.
    return c.any(st != Status::kOk) ? Status::kPeerFailed : Status::kOk;
  }
};

}  // namespace weft::dev
