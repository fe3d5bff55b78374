// Fused GEMV + AllReduce, the row-parallel linear layer of tensor-parallel decoding:
//   y[b, j] = sum over ranks r of sum_k x_r[b, k] * w_r[j, k]
// (x: [batch, k_local], w: [n, k_local] as torch.nn.Linear stores it, y: [batch, n] in the heap).
//
// The rows are cut into slices of kGemvSliceRows (32); a slice's partials are gemvSliceFloats(batch)
// floats, batch-major (gemv_slices_device.hpp), and start on a line pair. The op has G compute
// items, about one per worker group that runs it (OpDesc::grain = G), and G reduce items
// after them. Compute item i streams a run of consecutive slices: for each, the block computes
// this rank's float32 partial sums of the slice's rows for every batch entry (on tensor cores
// where gemv_mma_device.hpp applies, else a row per warp with 16-byte loads and a shuffle
// reduction) and pushes them, flagged (flagged_exchange_device.hpp), while its loads of the next
// slice are in flight. Reduce item G + i then finishes the same run's slices into y: the slices
// it reads first were computed first, so by the time a group reaches its reduce item most of
// what it needs has landed. Two ways to reduce:
//   - every rank reduces every slice (one-shot): the partials go to every rank, this one
//     included, and each sums all ranks' in rank order. One hop; each rank sends its partials
//     nranks - 1 times.
//   - the slice's owner (rank slice % nranks) reduces it (reduce-scatter, then all-gather): the
//     partials go to the owner alone; it sums them, writes y and sends the sums on to every peer,
//     which stores them. Two hops, but each rank sends 2 (nranks - 1) / nranks of its partials'
//     bytes: the way for large batch * n (the path table says where).
// No separate communication kernel, no intermediate copy; partials cross ranks in float32, and
// every rank's y is the same bit for bit.
//
// GemvOp is the same compute writing y directly: the unfused first half (an AllReduce of y
// follows), used where the path table says so, where the partials would not fit the one-shot
// scratch, and on one rank.
#pragma once

// How the ops' run functions are declared: the GEMV kernel's translation unit
// (gpu/gemv_kernel.cu) defines it as WEFT_INLINE, so that nvcc's inliner cannot make a call of
// either body there, whatever the host's headers; elsewhere (the persistent kernel) the compiler
// decides.
#ifndef WEFT_GEMV_RUN
#define WEFT_GEMV_RUN
#endif

#include "../../coop_device.hpp"
#include "../../dtype_device.hpp"
#include "../../vector_device.hpp"
#include "../flagged_exchange_device.hpp"
#include "gemv_args.hpp"
#include "gemv_rows_device.hpp"
#include "gemv_slices_device.hpp"

namespace weft::dev {

struct GemvAllReduceOp {
  // OpDesc fields: send = x, count = n, recv = y's heap offset, grain = compute items,
  // args.gemv the rest (owners: slices reduced by their owners, where fusedOwnersFit, else every
  // rank reduces every slice).
  WEFT_HOST_DEVICE static GemvShape shape(const OpDesc& d) {
    const GemvOpArgs& g = d.args.gemv;
    return GemvShape{reinterpret_cast<const uint8_t*>(d.send), reinterpret_cast<const uint8_t*>(g.w),
                     static_cast<uint32_t>(g.batch), d.count, g.k};
  }
  WEFT_HOST_DEVICE static uint64_t numSlices(uint64_t n) { return n == 0 ? 1 : ceilDiv(n, kGemvSliceRows); }
  // One compute item per worker group that runs the op at once (`groups`), or per slice if fewer.
  WEFT_HOST_DEVICE static uint32_t computeItems(uint64_t n, uint32_t groups) {
    return static_cast<uint32_t>(minU64(numSlices(n), groups == 0 ? 1 : groups));
  }
  // The rank that reduces slice `slice` where the owners do.
  WEFT_HOST_DEVICE static int sliceOwner(uint64_t slice, int nranks) {
    return static_cast<int>(slice % static_cast<uint64_t>(nranks));
  }
  // Whether the slices can be reduced by their owners (sliceOwner: slice s by rank s % nranks): every rank
  // must own one, so that every pair of ranks exchanges lines in every op (the flagged exchange
  // reuses its scratch on that condition).
  WEFT_HOST_DEVICE static bool fusedOwnersFit(uint64_t n, int nranks) {
    return nranks > 1 && numSlices(n) >= static_cast<uint64_t>(nranks);
  }
  // The fused op's items: the compute items, then as many reduce items.
  WEFT_HOST_DEVICE static uint32_t numItems(uint32_t computeItems) { return 2 * computeItems; }
  // The slices of compute item i of `items` (and of reduce item items + i).
  WEFT_HOST_DEVICE static Range itemSlices(uint64_t n, uint32_t items, uint32_t i) {
    const uint64_t slices = numSlices(n);
    return Range{slices * i / items, slices * (i + 1) / items};
  }

  template <class Coop>
  WEFT_HOST_DEVICE WEFT_GEMV_RUN static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                                   uint32_t item) {
    const GemvShape s = shape(d);
    const uint32_t items = d.grain;
    const auto dt = static_cast<DType>(d.dtype);
    const uint64_t sliceFloats = gemvSliceFloats(s.batch);  // even
    const bool owners = d.args.gemv.owners != 0;
    const int me = v.rank, nranks = v.nranks;
    auto ownerOf = [=](uint64_t slice) { return sliceOwner(slice, nranks); };
    if (item < items) {
      const Range mine = itemSlices(s.n, items, item);
      return owners ? computeAndPush<true>(c, v, seq, dt, s, mine) : computeAndPush<false>(c, v, seq, dt, s, mine);
    }
    // The first reduce item checks the op (the compute items have no register to spare on a GPU):
    // it publishes this rank's signature word and compares every peer's before it reduces
    // (flagged_exchange_device.hpp).
    if (d.sig != 0 && item == items)
      if (const Status st = itemSigs(c, v, sigWord(runningOpMeet(), d.sig), seq.op, item, true, true);
          st != Status::kOk)
        return st;
    const Range slices = itemSlices(s.n, items, item - items);
    const uint32_t batch = s.batch;
    const uint64_t n = s.n, pairsPerSlice = sliceFloats / 2;
    const uint32_t flag = flagOf(seq);
    struct Acc {
      float v[2];
    };
    uint8_t* y = v.at(me, d.recv);
    auto own = [](uint64_t) { return uint64_t{0}; };
    auto add = [](Acc& acc, uint64_t x) {
      acc.v[0] += bitsFloat(static_cast<uint32_t>(x));
      acc.v[1] += bitsFloat(static_cast<uint32_t>(x >> 32));
    };
    auto finish = [=](uint64_t k, const Acc& acc) {
      // Floats 2k and 2k + 1: rows j and j + 1 of batch entry b (slice q / batch).
      const uint64_t q = 2 * k / kGemvSliceRows, slice = q / batch;
      const uint64_t j = slice * kGemvSliceRows + 2 * k % kGemvSliceRows, b = q - slice * batch;
      for (int h = 0; h < 2; ++h)
        if (j + h < n) storeFromFloat(y, b * n + j + h, dt, acc.v[h]);
      // The owner's sums go on to every peer, which stores them as they are.
      if (owners && ownerOf(slice) == me) {
        const uint64_t sums = floatBits(acc.v[0]) | (uint64_t{floatBits(acc.v[1])} << 32);
        for (int p = 1; p < nranks; ++p) llStore(flaggedPair(v, seq, (me + p) % nranks, me, k), sums, flag);
      }
    };
    auto from = [=](uint64_t k) {
      const int o = ownerOf(k / pairsPerSlice);
      return !owners || o == me ? Range{0, UINT64_MAX} : Range{static_cast<uint64_t>(o), o + uint64_t{1}};
    };
    // Through the proxy an owner's sums travel only when it posts them, and a peer's item may wait
    // on them while this one waits on the peer's: each slice's sums go as soon as they are taken.
    // (Compiled only where device code posts: the GEMV kernel has no register to spare.)
    if constexpr (kProxyInDevice) {
      if (owners && proxyOf(v) != nullptr) {
        for (uint64_t slice = slices.lo; slice < slices.hi; ++slice) {
          Status st =
              reduceFlagged<Acc, 4, false>(c, v, seq, item, Range{slice * pairsPerSlice, (slice + 1) * pairsPerSlice},
                                           /*selfInScratch=*/true, own, add, finish, from);
          if (st == Status::kOk && ownerOf(slice) == me) st = deliverSums(c, v, seq, item, slice, pairsPerSlice);
          if (st != Status::kOk) return st;
        }
        return Status::kOk;
      }
    }
    return reduceFlagged<Acc, 4, false>(c, v, seq, item, Range{slices.lo * pairsPerSlice, slices.hi * pairsPerSlice},
                                        /*selfInScratch=*/true, own, add, finish, from);
  }

  // The owner's sums of `slice`, stored into its mirrors of the peers reached through the proxy,
  // go to them (flagged pairs: as pushFlaggedTo carries them).
  template <class Coop>
  WEFT_HOST_DEVICE static Status deliverSums(const Coop& c, const CommView& v, const OpSeq& seq, uint32_t item,
                                             uint64_t slice, uint64_t pairsPerSlice) {
    c.sync();
    Status st = Status::kOk;
    const uint64_t at =
        v.layout.oneShotDataOffset(v.rank, static_cast<uint32_t>(seq.epoch & 1)) + slice * pairsPerSlice * kLlPairBytes;
    if (c.leader())
      for (int p = 1; p < v.nranks && st == Status::kOk; ++p) {
        const int j = (v.rank + p) % v.nranks;
        if (viaProxy(v, j))
          st = postTrigger(v, WaitSite{seq.op, item, j, WaitWhat::kProxyRoom},
                           triggerWord0(TriggerKind::kDeliver, j, at), pairsPerSlice * kLlPairBytes);
      }
    return c.broadcast(st);
  }

#if defined(WEFT_HAVE_MMA)
  // Thread `thread` of a launched kernel's block, before anything else: asks L2 for the first
  // bytes of each row of compute item `item`'s first slice (half the row, at most kWarmBytes), a
  // 128-byte line per prefetch, in the order the block's stream will read them, so that they are on
  // their way while the leader reads the protocol counters (one round trip) and the block sets up
  // its stream. Only where a tensor-core stream will read them (gemv::fitsShape). Measured on 4 and
  // 2 H200 (docs/archive/perf-journal-2026-11.md): with rows of 4 KB (k_local 2048) warming 2 KB of each made
  // the op faster, and the whole row, through the copy engine, slower (its L2 lookups of half of w
  // cost more than the latency they hid); with rows of 8 and 14 KB, 4 KB of each gains most, and
  // 2 KB only part of that.
  static constexpr uint64_t kWarmBytes = 4096;
  __device__ static void warmFirstSlice(const OpDesc& d, uint32_t item, uint32_t thread, uint32_t threads) {
    const GemvShape s = shape(d);
    const auto dt = static_cast<DType>(d.dtype);
    if (item >= d.grain || !gemv::fitsShape(dt, s)) return;
    const uint64_t rowBytes = s.k * 2, lines = minU64(rowBytes / 2, kWarmBytes) / 128;
    const uint64_t first = itemSlices(s.n, d.grain, item).lo * kGemvSliceRows;
    // Line i: step i / (4 x 32) of the stream (512 bytes of each row), row i / 4 % 32, its line i % 4.
    constexpr uint64_t kStepLines = kGemvSliceRows * 4;
    for (uint64_t i = thread; i < kStepLines * ceilDiv(lines, 4); i += threads) {
      const uint64_t row = first + i % kStepLines / 4, line = i / kStepLines * 4 + i % 4;
      if (row < s.n && line < lines) prefetchLineL2(s.w + row * rowBytes + line * 128);
    }
  }
#endif

  // Compute item: streams the slices and pushes each slice's partials, flagged, to every rank
  // (this one included: its reduce item reads its own partials there) or, with kToOwner, to the
  // slice's owner alone. Two instances rather than a runtime choice: the sink goes by value into
  // the streaming loop (a function of its own), and the owner's arithmetic in it grew the
  // kernel's stack frame from 384 to 1320 bytes and made the one-shot path a quarter slower at
  // batch 1 on 4 ranks (docs/archive/perf-journal-2026-11.md).
  template <bool kToOwner, class Coop>
  WEFT_HOST_DEVICE static Status computeAndPush(const Coop& c, const CommView& v, const OpSeq& seq, DType dt,
                                                const GemvShape& s, Range slices) {
    const uint64_t sliceFloats = gemvSliceFloats(s.batch);  // even
    streamSlices(c, dt, s, slices, [=, &c](Range rows, auto&& part) {
      const uint64_t slice = rows.lo / kGemvSliceRows, base = slice * sliceFloats;
      const auto live = static_cast<uint32_t>(rows.size());
      auto at = [&](uint32_t f) { return f % kGemvSliceRows < live ? floatBits(part(f)) : 0u; };
      auto pair = [&](uint64_t k) {
        const auto f = static_cast<uint32_t>(2 * k - base);
        return at(f) | (uint64_t{at(f + 1)} << 32);
      };
      const Range pairs{base / 2, (base + sliceFloats) / 2};
      // A push that fails (the host proxy's ring stayed full) has recorded the failure, which the
      // reduce items' waits then return; the status is not carried out of the stream, whose
      // registers the GEMV needs (docs/perf.md).
      if constexpr (kToOwner) {
        (void)pushFlaggedTo(c, v, seq, pairs, (sliceOwner(slice, v.nranks) - v.rank + v.nranks) % v.nranks, 1, pair);
      } else {
        (void)pushFlagged(c, v, seq, pairs, /*toSelf=*/true, pair);
      }
    });
    return Status::kOk;
  }

  // This rank's float32 partial sums of slices `slices`: after each slice, every thread of the
  // group calls sink(rows, part), part(f) being float f of the slice's partials (gemvSliceFloats).
  template <class Coop, class Sink>
  WEFT_HOST_DEVICE static void streamSlices(const Coop& c, DType dt, const GemvShape& s, Range slices,
                                            const Sink& sink) {
#if defined(WEFT_HAVE_MMA)
    if (gemv::fits(c, dt, s)) {
      if (dt == DType::kBFloat16)
        streamOnTensorCores<DType::kBFloat16>(c, s, slices, sink);
      else
        streamOnTensorCores<DType::kFloat16>(c, s, slices, sink);
      return;
    }
#endif
    float* part = c.floats();
    for (uint64_t i = slices.lo; i < slices.hi; ++i) {
      const Range rows = gemvRows(s.n, Range{i, i + 1});
      partials(c, dt, s, rows, part);
      c.sync();
      sink(rows, [&](uint32_t f) { return part[f]; });
      c.sync();  // the next slice's partials overwrite `part`
    }
  }

#if defined(WEFT_HAVE_MMA)
  // The tensor-core stream the batch needs: w's rows streamed whole up to batch 8
  // (gemv_rows_device.hpp), k split over the warps beyond (gemv_mma_device.hpp).
  template <DType T, class Sink>
  __device__ static void streamOnTensorCores(const BlockCoop& c, const GemvShape& s, Range slices, const Sink& sink) {
    if (s.batch <= gemv::kRowsBatch1)
      gemv::streamRows<T, 1>(c, s, slices, sink);
    else if (s.batch <= gemv::kRowsBatch4)
      gemv::streamRows<T, 4>(c, s, slices, sink);
    else if (s.batch <= 16)
      gemv::stream<T, 1>(c, s, slices, sink);
    else if (s.batch <= 32)
      gemv::stream<T, 2>(c, s, slices, sink);
    else
      gemv::stream<T, 4>(c, s, slices, sink);
  }
#endif

  // part[b * kGemvSliceRows + j - rows.lo] = sum_k x[b, k] * w[j, k] for j in rows, in float32.
  template <class Coop>
  WEFT_HOST_DEVICE static void partials(const Coop& c, DType dt, const GemvShape& s, Range rows, float* part) {
    withDType(dt, [&](auto tag) { partialsAs<Coop, decltype(tag)::value>(c, s, rows, part); });
  }

 private:
  template <class Coop, DType T>
  WEFT_HOST_DEVICE static void partialsAs(const Coop& c, const GemvShape& s, Range rows, float* part) {
    // Batch entries in chunks of a compile-time size, so that the accumulators stay in registers.
    for (uint32_t b0 = 0; b0 < s.batch;) {
      const uint32_t left = s.batch - b0;
      if (left >= 8) {
        chunk<Coop, T, 8>(c, s, rows, b0, part);
        b0 += 8;
      } else if (left >= 4) {
        chunk<Coop, T, 4>(c, s, rows, b0, part);
        b0 += 4;
      } else if (left >= 2) {
        chunk<Coop, T, 2>(c, s, rows, b0, part);
        b0 += 2;
      } else {
        chunk<Coop, T, 1>(c, s, rows, b0, part);
        b0 += 1;
      }
    }
  }

  // Batch entries [b0, b0 + B) of every row in `rows`: a warp takes kRows rows at a time, and each
  // lane has kU 16-byte vectors of each of them in flight before it uses any (a GEMV streams w:
  // the bytes in flight, not the arithmetic, set its speed).
  template <class Coop, DType T, int B>
  WEFT_HOST_DEVICE static void chunk(const Coop& c, const GemvShape& s, Range rows, uint32_t b0, float* part) {
    constexpr int kU = B >= 8 ? 2 : 8, kRows = 2;  // fewer w vectors in flight for 8 accumulators
    constexpr uint32_t es = T == DType::kFloat32 ? 4 : 2;
    constexpr int per = kVecBytes / es;
    const uint64_t rowBytes = s.k * es;
    const bool vec = aligned16(s.w) && aligned16(s.x) && rowBytes % kVecBytes == 0;
    const uint64_t nvec = vec ? s.k / per : 0;
    const uint8_t* xb = s.x + b0 * rowBytes;
    for (uint64_t j0 = rows.lo + uint64_t{kRows} * c.warp(); j0 < rows.hi; j0 += uint64_t{kRows} * c.warps()) {
      float acc[kRows][B] = {};
      for (uint64_t q0 = c.lane(); q0 < nvec; q0 += uint64_t{prim::kWarpSize} * kU) {
        Vec16 wv[kRows][kU];
        WEFT_UNROLL
        for (int r = 0; r < kRows; ++r) WEFT_UNROLL
        for (int u = 0; u < kU; ++u) {
          const uint64_t q = q0 + u * uint64_t{prim::kWarpSize};
          if (q < nvec && j0 + r < rows.hi) wv[r][u] = load16(s.w + (j0 + r) * rowBytes + q * kVecBytes);
        }
        WEFT_UNROLL
        for (int u = 0; u < kU; ++u) {
          const uint64_t q = q0 + u * uint64_t{prim::kWarpSize};
          if (q >= nvec) continue;
          WEFT_UNROLL
          for (int b = 0; b < B; ++b) {
            float xf[8] = {};
            accumulate<T>(xf, load16(xb + b * rowBytes + q * kVecBytes));
            WEFT_UNROLL
            for (int r = 0; r < kRows; ++r) {
              float wf[8] = {};
              accumulate<T>(wf, wv[r][u]);
              WEFT_UNROLL
              for (int e = 0; e < per; ++e) acc[r][b] += wf[e] * xf[e];
            }
          }
        }
      }
      WEFT_UNROLL
      for (int r = 0; r < kRows; ++r) {
        if (j0 + r >= rows.hi) break;  // the same for the whole warp
        const uint8_t* wr = s.w + (j0 + r) * rowBytes;
        for (uint64_t e = nvec * per + c.lane(); e < s.k; e += prim::kWarpSize) {
          const float we = loadAsFloat(wr, e, T);
          WEFT_UNROLL
          for (int b = 0; b < B; ++b) acc[r][b] += we * loadAsFloat(xb + b * rowBytes, e, T);
        }
        WEFT_UNROLL
        for (int b = 0; b < B; ++b) {
          const float sum = prim::warpSum(acc[r][b]);
          if (c.lane() == 0) part[(b0 + b) * kGemvSliceRows + j0 + r - rows.lo] = sum;
        }
      }
    }
  }
};

// The plain GEMV (OpKind::kGemv): the fused op's streams, each slice stored into y.
struct GemvOp {
  template <class Coop>
  WEFT_HOST_DEVICE WEFT_GEMV_RUN static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq&,
                                                   uint32_t item) {
    using Op = GemvAllReduceOp;
    const GemvShape s = Op::shape(d);
    const auto dt = static_cast<DType>(d.dtype);
    uint8_t* y = v.at(v.rank, d.recv);
    const uint32_t sliceFloats = static_cast<uint32_t>(gemvSliceFloats(s.batch));
    const uint64_t n = s.n;
    Op::streamSlices(c, dt, s, Op::itemSlices(s.n, d.grain, item), [=, &c](Range rows, auto&& part) {
      const auto live = static_cast<uint32_t>(rows.size());
      for (auto f = static_cast<uint32_t>(c.rank()); f < sliceFloats; f += static_cast<uint32_t>(c.size()))
        if (f % kGemvSliceRows < live)
          storeFromFloat(y, f / kGemvSliceRows * n + rows.lo + f % kGemvSliceRows, dt, part(f));
    });
    return Status::kOk;
  }
};

}  // namespace weft::dev
