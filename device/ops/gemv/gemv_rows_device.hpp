// The GEMV for batch <= 8 on tensor cores, w streamed in runs of 128 bytes or more of each row
// (CUDA sm_80 and later, bf16/fp16, the same conditions as gemv_mma_device.hpp); the op
// (GemvAllReduceOp::streamOnTensorCores) chooses between this and the k-split stream there by batch.
//
// Why: the k-split stream's fragment layout makes every load instruction of a warp touch 8 rows x
// 64 bytes (half an L2 line each), and on H200 such loads stream w at 3.0-3.1 TB/s where
// instructions reading 4 rows x 128 bytes, 2 x 256 or 1 x 512 reach 3.75-3.84 TB/s, cuBLAS's rate
// (docs/archive/perf-journal-2026-11.md: one probe, the same ring and bytes, only the pattern changed).
//
// The tensor cores still do the sums, where the chunks of x and w agree. An instruction reads P
// rows x 512 / P bytes (P = 1 for batch <= 2, P = 4 for batch <= 8): lane (g, t)'s 16 bytes are two
// B operands of an m16n8k16 mma, column g being one chunk (32 elements) of one of the P rows, and
// A's rows g and g + 8 hold the same chunk of two of x's entries. Of D's 128 sums those whose
// row and column chunks agree count (8 of 128 at P = 1: the diagonal; 64 at P = 4); the others are
// thrown away, which costs nothing a GEMV of this batch could use (the memory system, not the
// tensor cores, sets its speed): at P = 1 two entries per mma, at P = 4 eight, as many mmas and
// x vectors per byte of w as the k-split stream's.
//
// A warp step is 4 instructions (4 P rows x 512 bytes) with kDepth steps of loads in flight in a
// register ring that runs on into the next slice. At P = 1 each warp streams 4 whole rows of each
// 32-row slice and no warp needs another's sums; at P = 4, 4 warps share 16 rows, each taking every
// fourth 128-byte segment, and the sink adds their 4 slots in order. A slice ends with a shuffle
// sum per row and entry into the group's shared floats, one barrier, the sink, and one more
// barrier. Loads past k or the batch are predicated off inside the instruction; rows past n read
// row n - 1, whose sums are never used. Sums in a fixed order: y is the same bit for bit from run
// to run.
#pragma once

#include "gemv_mma_device.hpp"

namespace weft::dev {

#if defined(WEFT_HAVE_MMA)
namespace gemv {

constexpr uint32_t kRowStep = prim::kWarpSize * 8;  // k per step: 512 bytes of each row a warp loads
// The batches of streamRows<T, 1> and streamRows<T, 4> (2 P entries per mma); larger ones split k.
constexpr uint32_t kRowsBatch1 = 2, kRowsBatch4 = 8;

// Slices `slices` of y's partial sums, each load instruction of a warp reading P rows x 512 / P
// bytes (P = 1: batch <= 2; P = 4: batch <= 8); after each slice, sink(rows, part) as for stream()
// (gemv_mma_device.hpp). Not inlined, for the reasons given there.
//
// Lane (g, t) of an instruction holds B's column g = row g / Q, chunk g % Q of the instruction's P
// rows (Q = 8 / P chunks of 32 elements per row segment), and loads x's entry g / Q (A's row g)
// and entry g / Q + P (row g + 8) at the same elements: A's row m is entry m / Q's chunk m % Q.
// D[m][n] counts where the chunks agree: lane (g, t) keeps d0 / d2 where column 2t has chunk
// g % Q, d1 / d3 where 2t + 1 has, for rows (2t or 2t + 1) / Q; the lanes of one entry and row,
// one per chunk, are summed over the warp. A warp step is 4 instructions (4 P rows, 2 KB); the
// P warps that share a step's rows split each row's 512 bytes of the step into segments.
template <DType T, int P, class Sink>
__device__ __noinline__ void streamRows(const BlockCoop c, const GemvShape s, const Range slices, Sink sink) {
  static_assert(P == 1 || P == 4, "the sums' lanes below are written for P = 1 and 4");
  static_assert(P * gemvSliceFloats(P == 1 ? kRowsBatch1 : kRowsBatch4) <= kCoopFloats,
                "the P slots of a slice's sums fit the group's floats");
  constexpr int kDepth = 4;  // steps in flight per warp (2 KB of w each): 64 KB per SM
  constexpr int Q = 8 / P;   // chunks per row segment
  constexpr int kLoads = 4;  // load instructions per step
  constexpr uint32_t kStepBytes = kRowStep * 2;
  constexpr uint32_t kSegElems = kRowStep / P;
  const int warp = c.warp(), lane = c.lane(), g = lane / 4, t = lane % 4;
  const int rowset = warp / P, kpart = warp % P;
  const uint64_t rowBytes = s.k * 2;
  // This lane's element of each step (its w row's and its x entries' alike).
  const uint64_t first = uint64_t{kSegElems} * kpart + 8 * static_cast<uint64_t>(lane % (prim::kWarpSize / P));
  // Steps per slice, a multiple of kDepth (as in stream()); this lane's steps with data.
  const auto per = static_cast<uint32_t>(maxU64(1, ceilDiv(ceilDiv(s.k, kRowStep), kDepth)) * kDepth);
  const uint32_t live = s.k > first && s.n > 0 ? static_cast<uint32_t>(ceilDiv(s.k - first, kRowStep)) : 0;
  StepCursor cur{per, live, static_cast<uint32_t>(slices.size())};
  // x's entries for A's rows g and g + 8.
  const uint32_t b0 = g / Q, b1 = g / Q + P;
  const uint8_t* const xp0 = s.x + b0 * rowBytes + first * 2;
  const uint8_t* const xp1 = s.x + b1 * rowBytes + first * 2;
  const bool on0 = b0 < s.batch, on1 = b1 < s.batch;
  // The cursor slice's rows: wp[i], this lane's row of instruction i.
  const uint64_t rowInSlice = uint64_t{4 * P} * rowset + lane / (prim::kWarpSize / P);
  const uint8_t* wp[kLoads];
  auto aim = [&] {
    WEFT_UNROLL
    for (int i = 0; i < kLoads; ++i) {
      const uint64_t row = minU64((slices.lo + cur.m) * kGemvSliceRows + rowInSlice + P * i, s.n == 0 ? 0 : s.n - 1);
      wp[i] = s.w + row * rowBytes + first * 2;
    }
  };
  struct Frag {
    Vec16 w[kLoads];
  };
  auto loadW = [&](Frag& f, int u, int left) {
    const uint32_t off = (cur.j + u) * kStepBytes;
    WEFT_UNROLL
    for (int i = 0; i < kLoads; ++i) f.w[i] = load16If<true>(wp[i] + off, u < left);
  };
  float acc[kLoads][4] = {};
  // Step j of the slice, with x's same elements (L1 serves them), loaded as used.
  auto multiply = [&](const Frag& f, uint32_t j, bool on) {
    const Vec16 x0 = load16If<false>(xp0 + j * kStepBytes, on && on0);
    const Vec16 x1 = load16If<false>(xp1 + j * kStepBytes, on && on1);
    WEFT_UNROLL
    for (int h = 0; h < 2; ++h) {  // elements 0-3 of each vector, then 4-7
      const uint32_t a[4] = {x0.w[2 * h], x1.w[2 * h], x0.w[2 * h + 1], x1.w[2 * h + 1]};
      WEFT_UNROLL
      for (int i = 0; i < kLoads; ++i) mma16816<T>(acc[i], a, f.w[i].w[2 * h], f.w[i].w[2 * h + 1]);
    }
  };
  // A slice's sums: the warp's P-th of each row into slot `kpart` of the group's floats (the
  // slice's layout, gemvSliceFloats, each), then the sink adds the P slots in order.
  const uint32_t slot = sharedAddress(c.floats());
  const uint32_t pitch = static_cast<uint32_t>(gemvSliceFloats(s.batch)) * 4;  // bytes per slot
  const int chunk = g % Q;
  const bool keep0 = (2 * t) % Q == chunk, keep1 = (2 * t + 1) % Q == chunk;
  // The lanes that store a sum, and the entry and row (of instruction 0) it belongs to.
  const bool writer = P == 1 ? lane == 0 : chunk == 0;
  const uint32_t rowOut = uint32_t{4 * P} * rowset + (P == 1 ? 0 : t);
  auto finishSlice = [&](uint64_t m) {
    WEFT_UNROLL
    for (int i = 0; i < kLoads; ++i) {
      WEFT_UNROLL
      for (int e = 0; e < 2; ++e) {
        float v = (keep0 ? acc[i][2 * e] : 0.f) + (keep1 ? acc[i][2 * e + 1] : 0.f);
        if constexpr (P == 1)
          v = prim::warpSum(v);
        else
          v += __shfl_xor_sync(0xffffffffu, v, 4);  // the other chunk: lane g ^ 1
        const uint32_t b = e == 0 ? b0 : b1;
        if (writer && b < s.batch) storeShared(slot + kpart * pitch + 4 * (b * kGemvSliceRows + rowOut + P * i), v);
      }
      WEFT_UNROLL
      for (int e = 0; e < 4; ++e) acc[i][e] = 0.f;
    }
    c.sync();
    sink(gemvRows(s.n, Range{slices.lo + m, slices.lo + m + 1}), [&](uint32_t f) {
      float sum = loadShared(slot + 4 * f);
      WEFT_UNROLL
      for (int q = 1; q < P; ++q) sum += loadShared(slot + q * pitch + 4 * f);
      return sum;
    });
    c.sync();  // the next slice's sums overwrite the floats
  };
  ringLoop<kDepth, Frag>(cur, loadW, aim, multiply, finishSlice);
}

}  // namespace gemv
#endif

}  // namespace weft::dev
