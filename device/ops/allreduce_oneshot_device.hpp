// One-shot sum AllReduce, for small inputs where latency, not bandwidth, is the cost: the input,
// cut into line pairs of 8 bytes, is the payload of one flagged exchange
// (flagged_exchange_device.hpp); every rank sums all inputs in rank order and float32 and writes
// its own output. Peers never touch this rank's output, so in place needs nothing more: a thread
// reads its input pairs before it writes them.
#pragma once

#include "../vector_device.hpp"
#include "flagged_exchange_device.hpp"

namespace weft::dev {

struct AllReduceOneShotOp {
  static constexpr uint64_t kPairsPerItem = 256;  // at least: one pair per thread of a 256-thread block
  // The launched grid is as many blocks, where that many are resident (two per SM on H200). 64
  // items left half of a 128-block grid idle: 128 made 256 KB-1 MB 8-13% faster on 2 H200
  // (docs/perf.md, session 13); 256 halves each thread's chain of loads again (session 14).
  static constexpr uint32_t kMaxItems = 256;

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
    return withDType(static_cast<DType>(d.dtype),
                     [&](auto tag) { return runAs<Coop, decltype(tag)::value>(c, v, d, seq, item); });
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
  template <class Coop, DType T>
  WEFT_HOST_DEVICE static Status runAs(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                       uint32_t item) {
    struct Acc {
      float lanes[8];
    };
    const uint64_t bytes = d.count * dtypeSize(T);
    const auto* send = reinterpret_cast<const uint8_t*>(d.send);
    uint8_t* out = v.at(v.rank, d.recv);
    return exchangeFlagged<Acc>(
        c, v, seq, item, itemPairs(bytes, d.nitems, item), [&](uint64_t k) { return loadPair(send, bytes, k); },
        [](Acc& acc, uint64_t x) {
          Vec16 w{};
          w.w[0] = static_cast<uint32_t>(x);
          w.w[1] = static_cast<uint32_t>(x >> 32);
          accumulate<T>(acc.lanes, w);
        },
        [&](uint64_t k, const Acc& acc) {
          const Vec16 sum = pack<T>(acc.lanes);
          storePair(out, bytes, k, sum.w[0] | (uint64_t{sum.w[1]} << 32));
        });
  }
};

}  // namespace weft::dev
