// One-shot sum AllReduce, for small inputs where latency, not bandwidth, is the cost: every rank
// sends its whole input to every peer, then sums all inputs in rank order and float32 and writes
// its own output. Peers never touch this rank's output, so in place needs nothing more: a thread
// reads its input words before it writes them.
//
// Two wire formats, chosen by the host per op (`oneshot_protocol`, OpDesc args.oneShot.lines):
//   - 128-byte lines (ll128_device.hpp): 120 payload bytes a line; by default on CUDA GPUs (NVLink)
//     and the CPU backend once an op sends 128 KB in all;
//   - 8-byte flagged lines (ll_device.hpp): 8 payload bytes in 16, the one flagged exchange the
//     fused GEMV also uses (flagged_exchange_device.hpp); smaller ops, HIP, and GPUs on PCIe.
#pragma once

#include "../../ll128_device.hpp"
#include "../../vector_device.hpp"
#include "../flagged_exchange_device.hpp"

namespace weft::dev {

struct AllReduceOneShotOp {
  static constexpr uint64_t kPairsPerItem = 256;  // at least: one pair per thread of a 256-thread block
  static constexpr uint64_t kLinesPerItem = 16;   // at least: half a 256-thread block's lines
  // The launched grid is as many blocks, where that many are resident (two per SM on H200). 64
  // items left half of a 128-block grid idle: 128 made 256 KB-1 MB 8-13% faster on 2 H200, and
  // 256 halves each thread's chain of loads again (docs/archive/perf-journal-2026-11.md).
  static constexpr uint32_t kMaxItems = 256;

  WEFT_HOST_DEVICE static uint64_t pairs(uint64_t bytes) { return ceilDiv(bytes, kLlPayloadBytes); }
  // The units (8-byte line pairs, or 128-byte lines) an input of `bytes` travels in.
  WEFT_HOST_DEVICE static uint64_t units(uint64_t bytes, bool lines) { return lines ? linesFor(bytes) : pairs(bytes); }
  WEFT_HOST_DEVICE static uint32_t numItems(uint64_t bytes, bool lines) {
    const uint64_t n = ceilDiv(units(bytes, lines), lines ? kLinesPerItem : kPairsPerItem);
    return n == 0 ? 1u : n > kMaxItems ? kMaxItems : static_cast<uint32_t>(n);
  }
  // The units work item `item` of `nitems` owns.
  WEFT_HOST_DEVICE static Range itemUnits(uint64_t bytes, bool lines, uint32_t nitems, uint32_t item) {
    const uint64_t all = units(bytes, lines), per = ceilDiv(all, nitems);
    return Range{minU64(all, per * item), minU64(all, per * (item + 1))};
  }
  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                     uint32_t item) {
    return d.args.oneShot.lines ? runIn<true>(c, v, d, seq, item) : runIn<false>(c, v, d, seq, item);
  }
  // In the wire format the descriptor names (kLines: d.args.oneShot.lines), for a kernel of its own.
  template <bool kLines, class Coop>
  WEFT_HOST_DEVICE static Status runIn(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                       uint32_t item) {
    // An empty op sends nothing else, so it meets its peers through the signature words alone,
    // checked or not. Other ops publish theirs after the push (publishWord).
    if (d.count == 0) return itemSigs(c, v, sigWord(runningOpMeet(), d.sig), seq.op, item, item == 0, true);
    return withDType(static_cast<DType>(d.dtype), [&](auto tag) {
      constexpr DType T = decltype(tag)::value;
      if constexpr (kLines)
        return runLines<Coop, T>(c, v, d, seq, item);
      else
        return runPairs<Coop, T>(c, v, d, seq, item);
    });
  }

 private:
  // The flag word of the 128-byte lines: the epoch (below 2^32 in any job, and never 0), with the
  // signature's flag bits (sigFlagBits) in the upper half, so that a disagreeing peer's lines
  // never land.
  WEFT_HOST_DEVICE static uint64_t lineFlag(const OpSeq& seq, uint32_t sig) {
    return seq.epoch ^ (uint64_t{sigFlagBits(sig)} << 32);
  }
  // Item 0 publishes this rank's signature word once its lines have left (publishSigAfterData).
  template <class Coop>
  WEFT_HOST_DEVICE static Status publishWord(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                             uint32_t item) {
    if (item != 0 || d.sig == 0) return Status::kOk;
    return publishSigAfterData(c, v, sigWord(runningOpMeet(), d.sig), seq.op, item);
  }
  template <class Coop, DType T>
  WEFT_HOST_DEVICE static Status runPairs(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                          uint32_t item) {
    struct Acc {
      float lanes[8];
    };
    const uint64_t bytes = d.count * dtypeSize(T);
    const auto* send = reinterpret_cast<const uint8_t*>(d.send);
    uint8_t* out = v.at(v.rank, d.recv);
    const Range r = itemUnits(bytes, false, d.nitems, item);
    auto own = [&](uint64_t k) { return loadPayloadWord(send, bytes, k); };
    if (const Status st = pushFlagged(c, v, seq, r, false, own, item); st != Status::kOk) return st;
    if (const Status st = publishWord(c, v, d, seq, item); st != Status::kOk) return st;
    return reduceFlagged<Acc, 1, true>(
        c, v, seq, item, r, false, own, [](Acc& acc, uint64_t x) { accumulate<T>(acc.lanes, wordsVec(x, 0)); },
        [&](uint64_t k, const Acc& acc) { storePayloadWord(out, bytes, k, vecWord(pack<T>(acc.lanes), 0)); });
  }

  // Where rank `sender`'s line k lies in rank `owner`'s line area for the op's epoch.
  WEFT_HOST_DEVICE static uint64_t* linePtr(const CommView& v, const OpSeq& seq, int owner, int sender, uint64_t k) {
    const auto parity = static_cast<uint32_t>(seq.epoch & 1);
    return reinterpret_cast<uint64_t*>(v.at(owner, v.layout.lineDataOffset(sender, parity)) + k * kLineBytes);
  }

  // The 128-byte line format. Lines go round the group a warp at a time (kLinesPerWarp lines per
  // warp and step), so that a line's lanes always store and poll together: every loop bound below
  // is the same in every thread of a warp. First every line of the item goes to every peer (no
  // fence, no signal: the flag travels with the data), then each line's sum is taken in rank order.
  // Epoch e's flag word is e with the op's signature in its upper half (lineFlag): lines in an
  // area are only ever 128-byte lines, and stale ones carry an earlier epoch of the same parity (or
  // zero), so the reuse argument and the signature's of the 8-byte lines
  // (flagged_exchange_device.hpp) hold as they are.
  template <class Coop, DType T>
  WEFT_HOST_DEVICE static Status runLines(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                          uint32_t item) {
    const uint64_t bytes = d.count * dtypeSize(T), flag = lineFlag(seq, d.sig);
    const auto* send = reinterpret_cast<const uint8_t*>(d.send);
    uint8_t* out = v.at(v.rank, d.recv);
    const Range r = itemUnits(bytes, true, d.nitems, item);
    const int lane = c.lane();
    const auto step = static_cast<uint64_t>(c.warps()) * kLinesPerWarp;
    const uint64_t first = r.lo + static_cast<uint64_t>(c.warp()) * kLinesPerWarp;
    auto lineOf = [&](uint64_t base) { return base + static_cast<uint64_t>(lane) / kLineLanes; };
    // Lane q of line k holds payload words 2q and 2q + 1 of the line: input words 15k + 2q on.
    auto firstWord = [](uint64_t k, int q) { return k * kLinePayloadWords + 2 * static_cast<uint64_t>(q); };
    auto own = [&](uint64_t k, LineShare* s) {
      WEFT_UNROLL
      for (int i = 0; i < kLanesPerThread; ++i) {
        const int q = lineLane(i, lane);
        const uint64_t word = firstWord(k, q);
        s->w[2 * i] = loadPayloadWord(send, bytes, word);
        s->w[2 * i + 1] = laneHasSecondWord(q) ? loadPayloadWord(send, bytes, word + 1) : 0;
      }
    };
    for (uint64_t base = first; base < r.hi; base += step) {
      const uint64_t k = lineOf(base);
      LineShare s{};
      if (k < r.hi) own(k, &s);
      prim::warpSync();
      if (k < r.hi)
        for (int p = 1; p < v.nranks; ++p)
          lineStore(linePtr(v, seq, (v.rank + p) % v.nranks, v.rank, k), s, lane, flag);
    }
    Status st = publishWord(c, v, d, seq, item);
    if (st != Status::kOk) return st;
    for (uint64_t base = first; base < r.hi && st == Status::kOk; base += step) {
      const uint64_t k = lineOf(base);
      float acc[kLanesPerThread][8] = {};
      for (int src = 0; src < v.nranks && st == Status::kOk; ++src) {
        LineShare s{};
        if (src == v.rank) {
          if (k < r.hi) own(k, &s);
        } else {
          st = lineWait(v, k < r.hi ? linePtr(v, seq, v.rank, src, k) : nullptr, flag, &s,
                        WaitSite{seq.op, item, src, WaitWhat::kInboxData});
        }
        WEFT_UNROLL
        for (int i = 0; i < kLanesPerThread; ++i) accumulate<T>(acc[i], wordsVec(s.w[2 * i], s.w[2 * i + 1]));
      }
      if (st != Status::kOk || k >= r.hi) continue;
      WEFT_UNROLL
      for (int i = 0; i < kLanesPerThread; ++i) {
        const int q = lineLane(i, lane);
        const uint64_t word = firstWord(k, q);
        const Vec16 sum = pack<T>(acc[i]);
        storePayloadWord(out, bytes, word, vecWord(sum, 0));
        if (laneHasSecondWord(q)) storePayloadWord(out, bytes, word + 1, vecWord(sum, 1));
      }
    }
    // The warp that failed recorded why; the whole group reports the communicator as failed.
    return c.any(st != Status::kOk) ? Status::kPeerFailed : Status::kOk;
  }
  // Two 8-byte words as a vector (a first), and word i (0 or 1) of a vector.
  WEFT_HOST_DEVICE static uint64_t vecWord(const Vec16& v, int i) {
    return v.w[2 * i] | (uint64_t{v.w[2 * i + 1]} << 32);
  }
  WEFT_HOST_DEVICE static Vec16 wordsVec(uint64_t a, uint64_t b) {
    Vec16 w{};
    w.w[0] = static_cast<uint32_t>(a);
    w.w[1] = static_cast<uint32_t>(a >> 32);
    w.w[2] = static_cast<uint32_t>(b);
    w.w[3] = static_cast<uint32_t>(b >> 32);
    return w;
  }
};

}  // namespace weft::dev
