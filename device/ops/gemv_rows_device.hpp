// The GEMV for batch <= 2 on tensor cores, w streamed a row at a time (CUDA sm_80 and later,
// bf16/fp16, the same conditions as gemv_mma_device.hpp), and the choice between this and the
// k-split stream there by batch.
//
// Why rows: the k-split stream's fragment layout makes every load instruction of a warp touch 8
// rows x 64 bytes, and on H200 such loads stream w at 3.1 TB/s where loads of 512 bytes of one
// row reach 3.8 TB/s, cuBLAS's rate (docs/perf.md, session 11: the same probe, only the pattern
// changed). Here lane l of a warp loads the 16 bytes at element 8 l of a 256-element step of one
// row: a warp instruction reads 512 contiguous bytes.
//
// The tensor cores still do the sums, through their diagonal. With lane (g = l / 4, t = l % 4)
// holding elements 32 g + 8 t .. + 7 of the step, its 16 bytes are two B operands of an m16n8k16
// mma whose column g is chunk g (32 elements) of the row; A's row g holds the same chunk g of
// one batch entry's x and its row g + 8 that of the next entry. D[c][c] is then chunk c's dot
// product (D[c + 8][c] the next entry's), and a row's sum over the step is the trace: the other
// 112 of D's 128 sums are thrown away, which costs nothing a GEMV of this batch could use (the
// memory system, not the tensor cores, sets its speed). The diagonal sits in lanes t = g / 2 (d0
// and d2 where g is even, d1 and d3 where odd), summed over the warp once per slice.
//
// Each warp streams whole rows: warp w takes rows 4 w .. 4 w + 3 of each 32-row slice, every k
// step of them, with kDepth steps of loads in flight in a register ring that runs on into the
// next slice. No warp's sums need another's: a slice ends with a warp reduction per row and batch
// entry into the group's shared floats, one barrier, the sink, and one more barrier. Loads past k
// or the batch are predicated off inside the instruction; rows past n read row n - 1, whose sums
// are never used. Sums in a fixed order: y is the same bit for bit from run to run.
//
// Batch 3-8 this way (two entries per mma, so 2-4 mmas and x vectors per row and step) measured
// slower than the k-split stream (docs/perf.md, session 11): they keep it.
#pragma once

#include "gemv_mma_device.hpp"

namespace weft::dev {

#if defined(WEFT_HAVE_MMA)
namespace gemv {

constexpr uint32_t kRowsMaxBatch = 2;               // streamRows' batches; larger ones split k
constexpr int kWarpRows = kGemvSliceRows / kWarps;  // a warp's rows of each slice
constexpr uint32_t kRowStep = gpu::kWarpSize * 8;   // k per step: 512 bytes of one row per load

__device__ inline void storeShared(uint32_t a, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(a), "f"(v) : "memory");
}

// Slices `slices` of y's partial sums for batch <= kRowsMaxBatch; after each slice, sink(rows,
// part) as for stream() (gemv_mma_device.hpp). Not inlined, for the reasons given there.
template <DType T, class Sink>
__device__ __noinline__ void streamRows(const BlockCoop c, const GemvShape s, const Range slices, Sink sink) {
  constexpr int kDepth = 4;  // steps in flight per warp (2 KB of w each): 64 KB per SM
  constexpr uint32_t kStepBytes = kRowStep * 2;
  const int warp = c.warp(), lane = c.lane();
  const uint64_t rowBytes = s.k * 2, first = 8 * static_cast<uint64_t>(lane);
  // Steps per slice, a multiple of kDepth (as in stream()); this lane's steps with data.
  const auto per = static_cast<uint32_t>(maxU64(1, ceilDiv(ceilDiv(s.k, kRowStep), kDepth)) * kDepth);
  const uint32_t live = s.k > first && s.n > 0 ? static_cast<uint32_t>(ceilDiv(s.k - first, kRowStep)) : 0;
  StepCursor cur{per, live, static_cast<uint32_t>(slices.size())};
  // x's two entries (rows g and g + 8 of A), the second off at batch 1.
  const uint8_t* const xp = s.x + first * 2;
  const bool second = s.batch > 1;
  // The cursor slice's rows: wp[r], the warp's row r.
  const uint8_t* wp[kWarpRows];
  auto aim = [&] {
    WEFT_UNROLL
    for (int r = 0; r < kWarpRows; ++r) {
      const uint64_t row = minU64((slices.lo + cur.m) * kGemvSliceRows + kWarpRows * warp + r, s.n == 0 ? 0 : s.n - 1);
      wp[r] = s.w + row * rowBytes + first * 2;
    }
  };
  struct Frag {
    Vec16 w[kWarpRows];
  };
  auto loadW = [&](Frag& f, int u, int left) {
    const uint32_t off = (cur.j + u) * kStepBytes;
    WEFT_UNROLL
    for (int r = 0; r < kWarpRows; ++r) f.w[r] = load16If<true>(wp[r] + off, u < left);
  };
  float acc[kWarpRows][4] = {};
  // Step j of the slice, with x's same elements (L1 serves them), loaded as used.
  auto multiply = [&](const Frag& f, uint32_t j, bool on) {
    const Vec16 x0 = load16If<false>(xp + j * kStepBytes, on);
    const Vec16 x1 = load16If<false>(xp + rowBytes + j * kStepBytes, on && second);
    WEFT_UNROLL
    for (int h = 0; h < 2; ++h) {  // elements 0-3 of each vector, then 4-7
      const uint32_t a[4] = {x0.w[2 * h], x1.w[2 * h], x0.w[2 * h + 1], x1.w[2 * h + 1]};
      WEFT_UNROLL
      for (int r = 0; r < kWarpRows; ++r) mma16816<T>(acc[r], a, f.w[r].w[2 * h], f.w[r].w[2 * h + 1]);
    }
  };
  // A slice's sums: each row's trace over the warp into the group's floats (the slice's layout,
  // gemvSliceFloats), then the sink reads them.
  const uint32_t slot = sharedAddress(c.floats());
  const int g = lane / 4;
  const bool diagonal = lane % 4 == g / 2, odd = g % 2 != 0;
  auto finishSlice = [&](uint64_t m) {
    WEFT_UNROLL
    for (int r = 0; r < kWarpRows; ++r) {
      WEFT_UNROLL
      for (int b = 0; b < 2; ++b) {
        const float mine = odd ? acc[r][2 * b + 1] : acc[r][2 * b];
        const float sum = gpu::warpSum(diagonal ? mine : 0.f);
        if (lane == 0 && static_cast<uint32_t>(b) < s.batch)
          storeShared(slot + 4 * (b * kGemvSliceRows + kWarpRows * warp + r), sum);
      }
      WEFT_UNROLL
      for (int e = 0; e < 4; ++e) acc[r][e] = 0.f;
    }
    c.sync();
    sink(gemvRows(s.n, Range{slices.lo + m, slices.lo + m + 1}), [&](uint32_t f) { return loadShared(slot + 4 * f); });
    c.sync();  // the next slice's sums overwrite the floats
  };
  ringLoop<kDepth, Frag>(cur, loadW, aim, multiply, finishSlice);
}

// The stream the batch needs: whole rows up to kRowsMaxBatch, k split over the warps beyond.
template <DType T, class Sink>
__device__ void streamAnyBatch(const BlockCoop& c, const GemvShape& s, Range slices, const Sink& sink) {
  if (s.batch <= kRowsMaxBatch)
    streamRows<T>(c, s, slices, sink);
  else if (s.batch <= 8)
    stream<T, 1, false>(c, s, slices, sink);
  else if (s.batch <= 16)
    stream<T, 1, true>(c, s, slices, sink);
  else if (s.batch <= 32)
    stream<T, 2, true>(c, s, slices, sink);
  else
    stream<T, 4, true>(c, s, slices, sink);
}

}  // namespace gemv
#endif

}  // namespace weft::dev
