// Fused GEMV + AllReduce, the row-parallel linear layer of tensor-parallel decoding:
//   y[b, j] = sum over ranks r of sum_k x_r[b, k] * w_r[j, k]
// (x: [batch, k_local], w: [n, k_local] as torch.nn.Linear stores it, y: [batch, n] in the heap).
//
// Work item i owns output rows [j0, j1). Its warps compute this rank's float32 partial sums for
// those rows and every batch entry (each warp a row at a time, 16-byte loads of w, float32
// accumulation, a shuffle reduction) into group-shared memory; as soon as the item's slice is
// done it is the item's payload in one flagged exchange (flagged_exchange_device.hpp): pushed to
// every peer while other items still compute, and summed in rank order with every peer's partials
// of the same rows into y. No separate communication kernel and no intermediate copy. Partials
// travel in float32, laid out row by row (float j * batch + b), so an item's rows are one run of
// line pairs; an item has an even number of rows so that runs start on a pair.
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
  static constexpr uint32_t kTargetItems = 128;

  // OpDesc fields: send = x, count = n, recv = y's heap offset, tileElems = rows per item,
  // arg[0] = w, arg[1] = batch, arg[2] = k.
  WEFT_HOST_DEVICE static GemvShape shape(const OpDesc& d) {
    return GemvShape{reinterpret_cast<const uint8_t*>(d.send), reinterpret_cast<const uint8_t*>(d.arg[0]),
                     static_cast<uint32_t>(d.arg[1]), d.count, d.arg[2]};
  }
  // Even, at most what group-shared memory holds for `batch`, and about kTargetItems items.
  WEFT_HOST_DEVICE static uint32_t rowsPerItem(uint64_t n, uint32_t batch) {
    const uint64_t cap = (kCoopFloats / batch) & ~uint64_t{1};
    const uint64_t want = (ceilDiv(n, kTargetItems) + 1) & ~uint64_t{1};
    return static_cast<uint32_t>(want < 2 ? 2 : want > cap ? cap : want);
  }
  WEFT_HOST_DEVICE static uint32_t numItems(uint64_t n, uint32_t rows) {
    return n == 0 ? 1u : static_cast<uint32_t>(ceilDiv(n, rows));
  }
  WEFT_HOST_DEVICE static Range itemRows(const OpDesc& d, uint32_t item) {
    return Range{minU64(d.count, uint64_t{d.tileElems} * item), minU64(d.count, uint64_t{d.tileElems} * (item + 1))};
  }

  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                     uint32_t item) {
    const GemvShape s = shape(d);
    const Range rows = itemRows(d, item);
    const auto dt = static_cast<DType>(d.dtype);
    float* part = c.floats();
    partials(c, dt, s, rows, part);
    c.sync();
    struct Acc {
      float v[2];
    };
    const uint64_t base = rows.lo * s.batch;  // first float of this item's run (even)
    const uint64_t end = rows.hi * s.batch;
    uint8_t* y = v.at(v.rank, d.recv);
    auto partAt = [&](uint64_t f) { return f < end ? floatBits(part[f - base]) : 0u; };
    return exchangeFlagged<Acc>(
        c, v, seq, item, Range{base / 2, ceilDiv(end, 2)},
        [&](uint64_t k) { return partAt(2 * k) | (uint64_t{partAt(2 * k + 1)} << 32); },
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
    switch (dt) {
      case DType::kFloat32:
        return partialsAs<Coop, DType::kFloat32>(c, s, rows, part);
      case DType::kFloat16:
        return partialsAs<Coop, DType::kFloat16>(c, s, rows, part);
      default:
        return partialsAs<Coop, DType::kBFloat16>(c, s, rows, part);
    }
  }

 private:
  static constexpr uint32_t kBatchChunk = 8;  // batch entries one pass over a row of w serves

  template <class Coop, DType T>
  WEFT_HOST_DEVICE static void partialsAs(const Coop& c, const GemvShape& s, Range rows, float* part) {
    constexpr uint32_t es = T == DType::kFloat32 ? 4 : 2;
    constexpr uint64_t per = kVecBytes / es;
    const uint64_t rowBytes = s.k * es;
    const bool vec = aligned16(s.w) && aligned16(s.x) && rowBytes % kVecBytes == 0;
    const uint64_t nvec = vec ? s.k / per : 0;
    for (uint64_t j = rows.lo + c.warp(); j < rows.hi; j += c.warps()) {
      const uint8_t* wr = s.w + j * rowBytes;
      for (uint32_t b0 = 0; b0 < s.batch; b0 += kBatchChunk) {
        float acc[kBatchChunk] = {};
        for (uint64_t q = c.lane(); q < nvec; q += gpu::kWarpSize) {
          float wf[8] = {}, xf[8];
          accumulate<T>(wf, load16(wr + q * kVecBytes));
          for (uint32_t b = 0; b < kBatchChunk; ++b) {
            if (b0 + b >= s.batch) break;
            for (float& f : xf) f = 0.f;
            accumulate<T>(xf, load16(s.x + (b0 + b) * rowBytes + q * kVecBytes));
            for (uint64_t e = 0; e < per; ++e) acc[b] += wf[e] * xf[e];
          }
        }
        for (uint64_t e = nvec * per + c.lane(); e < s.k; e += gpu::kWarpSize) {
          const float we = loadAsFloat(wr, e, T);
          for (uint32_t b = 0; b < kBatchChunk && b0 + b < s.batch; ++b)
            acc[b] += we * loadAsFloat(s.x + (b0 + b) * rowBytes, e, T);
        }
        for (uint32_t b = 0; b < kBatchChunk && b0 + b < s.batch; ++b) {
          const float sum = gpu::warpSum(acc[b]);
          if (c.lane() == 0) part[(j - rows.lo) * s.batch + b0 + b] = sum;
        }
      }
    }
  }
};

struct GemvOp {
  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq&, uint32_t item) {
    const GemvShape s = GemvAllReduceOp::shape(d);
    const Range rows = GemvAllReduceOp::itemRows(d, item);
    const auto dt = static_cast<DType>(d.dtype);
    float* part = c.floats();
    GemvAllReduceOp::partials(c, dt, s, rows, part);
    c.sync();
    uint8_t* y = v.at(v.rank, d.recv);
    for (uint64_t f = c.rank(); f < rows.size() * s.batch; f += c.size())
      storeFromFloat(y, (f % s.batch) * s.n + rows.lo + f / s.batch, dt, part[f]);
    return Status::kOk;
  }
};

}  // namespace weft::dev
