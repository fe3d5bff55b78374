// Fused GEMV + AllReduce, the row-parallel linear layer of tensor-parallel decoding:
//   y[b, j] = sum over ranks r of sum_k x_r[b, k] * w_r[j, k]
// (x: [batch, k_local], w: [n, k_local] as torch.nn.Linear stores it, y: [batch, n] in the heap).
//
// The rows are cut into slices of an even number of rows (so that a slice's partials, laid out
// row by row as float j * batch + b, start on a line pair). Work item i < S computes slice i: its
// warps compute this rank's float32 partial sums for the slice's rows and every batch entry (a row
// per warp at a time, 16-byte loads of w, float32 accumulation, a shuffle reduction) into
// group-shared memory, and push them, flagged, to every peer and to this rank's own scratch
// (flagged_exchange_device.hpp); the items after the S compute items each sum a few slices'
// partials of every rank, in rank order, into y. Workers take items in increasing order, so every slice is computed and
// on its way while later slices are still being computed: the exchange overlaps the compute, and no separate
// communication kernel or intermediate copy is needed. Partials cross ranks in float32.
//
// GemvOp is the same compute writing y directly: the unfused first half, used where the partials
// would not fit the one-shot scratch (an AllReduce of y follows) and on one rank.
#pragma once

#include "../coop_device.hpp"
#include "../dtype_device.hpp"
#include "../vector_device.hpp"
#include "flagged_exchange_device.hpp"

namespace weft::dev {

struct GemvShape {
  const uint8_t* x;
  const uint8_t* w;
  uint32_t batch;
  uint64_t n;
  uint64_t k;
};

struct GemvAllReduceOp {
  static constexpr uint32_t kMaxBatch = 64;
  static constexpr uint32_t kTargetSlices = 512;

  // OpDesc fields: send = x, count = n, recv = y's heap offset, tileElems = rows per slice,
  // arg[0] = w, arg[1] = batch, arg[2] = k.
  WEFT_HOST_DEVICE static GemvShape shape(const OpDesc& d) {
    return GemvShape{reinterpret_cast<const uint8_t*>(d.send), reinterpret_cast<const uint8_t*>(d.arg[0]),
                     static_cast<uint32_t>(d.arg[1]), d.count, d.arg[2]};
  }
  // Even, at most what group-shared memory holds for `batch`, and about kTargetSlices slices.
  WEFT_HOST_DEVICE static uint32_t rowsPerSlice(uint64_t n, uint32_t batch) {
    const uint64_t cap = (kCoopFloats / batch) & ~uint64_t{1};
    const uint64_t want = (ceilDiv(n, kTargetSlices) + 1) & ~uint64_t{1};
    return static_cast<uint32_t>(want < 2 ? 2 : want > cap ? cap : want);
  }
  WEFT_HOST_DEVICE static uint32_t numSlices(uint64_t n, uint32_t rows) {
    return n == 0 ? 1u : static_cast<uint32_t>(ceilDiv(n, rows));
  }
  // Compute items, one per slice, then reduce items of kSlicesPerReduce slices each: a reduction
  // waits a memory latency per source and pair, so fewer, larger ones keep the tail short.
  static constexpr uint32_t kSlicesPerReduce = 4;
  WEFT_HOST_DEVICE static uint32_t numItems(uint64_t n, uint32_t rows) {
    const uint32_t slices = numSlices(n, rows);
    return slices + static_cast<uint32_t>(ceilDiv(slices, kSlicesPerReduce));
  }

  WEFT_HOST_DEVICE static Range sliceRows(const OpDesc& d, uint32_t slice) {
    return Range{minU64(d.count, uint64_t{d.tileElems} * slice), minU64(d.count, uint64_t{d.tileElems} * (slice + 1))};
  }

  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                     uint32_t item) {
    const GemvShape s = shape(d);
    const uint32_t slices = numSlices(d.count, d.tileElems);
    Range rows;
    if (item < slices) {
      rows = sliceRows(d, item);
    } else {
      const uint32_t first = (item - slices) * kSlicesPerReduce;
      rows = Range{sliceRows(d, first).lo, sliceRows(d, first + kSlicesPerReduce - 1).hi};
    }
    const auto dt = static_cast<DType>(d.dtype);
    const uint64_t base = rows.lo * s.batch;  // first float of the run (even)
    const uint64_t end = rows.hi * s.batch;
    const Range pairs{base / 2, ceilDiv(end, 2)};
    if (item < slices) {
      float* part = c.floats();
      partials(c, dt, s, rows, part);
      c.sync();
      auto partAt = [&](uint64_t f) { return f < end ? floatBits(part[f - base]) : 0u; };
      pushFlagged(c, v, seq, pairs, /*toSelf=*/true,
                  [&](uint64_t k) { return partAt(2 * k) | (uint64_t{partAt(2 * k + 1)} << 32); });
      c.sync();  // the next item's partials overwrite `part`
      return Status::kOk;
    }
    struct Acc {
      float v[2];
    };
    uint8_t* y = v.at(v.rank, d.recv);
    return reduceFlagged<Acc>(
        c, v, seq, item, pairs, /*selfInScratch=*/true, [](uint64_t) { return uint64_t{0}; },
        [](Acc& acc, uint64_t x) {
          acc.v[0] += bitsFloat(static_cast<uint32_t>(x));
          acc.v[1] += bitsFloat(static_cast<uint32_t>(x >> 32));
        },
        [&](uint64_t k, const Acc& acc) {
          for (int h = 0; h < 2; ++h) {
            const uint64_t f = 2 * k + h;
            if (f < end) storeFromFloat(y, (f % s.batch) * s.n + f / s.batch, dt, acc.v[h]);
          }
        });
  }

  // part[(j - rows.lo) * batch + b] = sum_k x[b, k] * w[j, k] for j in rows, in float32.
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
      for (uint64_t q0 = c.lane(); q0 < nvec; q0 += uint64_t{gpu::kWarpSize} * kU) {
        Vec16 wv[kRows][kU];
        WEFT_UNROLL
        for (int r = 0; r < kRows; ++r) WEFT_UNROLL
        for (int u = 0; u < kU; ++u) {
          const uint64_t q = q0 + u * uint64_t{gpu::kWarpSize};
          if (q < nvec && j0 + r < rows.hi) wv[r][u] = load16(s.w + (j0 + r) * rowBytes + q * kVecBytes);
        }
        WEFT_UNROLL
        for (int u = 0; u < kU; ++u) {
          const uint64_t q = q0 + u * uint64_t{gpu::kWarpSize};
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
        for (uint64_t e = nvec * per + c.lane(); e < s.k; e += gpu::kWarpSize) {
          const float we = loadAsFloat(wr, e, T);
          WEFT_UNROLL
          for (int b = 0; b < B; ++b) acc[r][b] += we * loadAsFloat(xb + b * rowBytes, e, T);
        }
        WEFT_UNROLL
        for (int b = 0; b < B; ++b) {
          const float sum = gpu::warpSum(acc[r][b]);
          if (c.lane() == 0) part[(j0 + r - rows.lo) * s.batch + b0 + b] = sum;
        }
      }
    }
  }
};

struct GemvOp {
  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq&, uint32_t item) {
    const GemvShape s = GemvAllReduceOp::shape(d);
    const Range rows = GemvAllReduceOp::sliceRows(d, item);
    const auto dt = static_cast<DType>(d.dtype);
    float* part = c.floats();
    GemvAllReduceOp::partials(c, dt, s, rows, part);
    c.sync();
    uint8_t* y = v.at(v.rank, d.recv);
    for (uint64_t f = c.rank(); f < rows.size() * s.batch; f += c.size())
      storeFromFloat(y, (f % s.batch) * s.n + rows.lo + f / s.batch, dt, part[f]);
    c.sync();  // the next item's partials overwrite `part`
    return Status::kOk;
  }
};

}  // namespace weft::dev
