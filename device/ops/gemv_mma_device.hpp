// The GEMV on tensor cores (CUDA sm_80 and later, bf16/fp16, rows of w and x 16-byte aligned):
// a block streams a run of 16-row slices of w, and its warps keep the memory system busy across
// slice boundaries, because a GEMV's speed is the bytes of w in flight and nothing else.
//
// One warp step covers 16 rows x 32 k: lane (g = lane / 4, t = lane % 4) loads the 16 bytes at
// k0 + 8t of rows g and g + 8, and of x rows g (+ 8, 16, ... for larger batches) — straight from
// global memory into mma.sync m16n8k16 fragments, no shared memory. That works because the sum
// over k does not care about the order of k: a fragment wants elements (2t, 2t + 1) and
// (2t + 8, 2t + 9) of each row and column, and we hand it elements 8t..8t+3 of both w and x, then
// 8t+4..8t+7 in a second mma, which pairs every w element with its own x element. The batch is
// the mma's n dimension (8 per tile; batch 1 uses one column of eight: the tensor cores have the
// throughput to spare, the memory system does not).
//
// The 8 warps of the block split each slice's k steps (warp w takes steps w, w + 8, ...), and each
// warp keeps kDepth steps of loads in flight in a ring of registers that runs on into the next
// slice: the barriers that fold the warps' partial sums at a slice's end do not drain the memory
// pipe. The fold is in a fixed order (warps w and w + 4, then slots 0-3 summed left to right), so
// y is the same bit for bit from run to run.
#pragma once

#include "../coop_device.hpp"
#include "../mma_device.hpp"
#include "partition_device.hpp"

namespace weft::dev {

constexpr uint32_t kGemvSliceRows = 16;  // one tensor-core tile of rows

struct GemvShape {
  const uint8_t* x;
  const uint8_t* w;
  uint32_t batch;
  uint64_t n;
  uint64_t k;
};

// Rows [lo, hi) of slices [slices.lo, slices.hi), clamped to n.
WEFT_HOST_DEVICE Range gemvRows(uint64_t n, Range slices) {
  return Range{minU64(n, slices.lo * kGemvSliceRows), minU64(n, slices.hi * kGemvSliceRows)};
}

#if defined(WEFT_HAVE_MMA)
namespace gemv {

constexpr int kWarps = 8;        // the block's warps split a slice's k steps
constexpr uint32_t kStepK = 32;  // k per warp step

// Whether the tensor-core path applies (otherwise the portable one runs).
__device__ inline bool fits(const BlockCoop& c, DType dt, const GemvShape& s) {
  return dt != DType::kFloat32 && c.warps() == kWarps && s.k % 8 == 0 && aligned16(s.w) && aligned16(s.x) &&
         uint64_t{4} * kGemvSliceRows * s.batch <= kCoopFloats;
}

// One lane's operands of one step: rows g and g + 8 of the slice's w, and x rows nb * 8 + g.
template <int NB>
struct Frag {
  Vec16 w[2];
  Vec16 x[NB];
};

template <DType T, int NB>
__device__ inline void multiply(const Frag<NB>& f, float (&acc)[NB][4]) {
  WEFT_UNROLL
  for (int nb = 0; nb < NB; ++nb) {
    WEFT_UNROLL
    for (int h = 0; h < 2; ++h) {  // elements 0-3 of each vector, then 4-7
      const uint32_t a[4] = {f.w[0].w[2 * h], f.w[1].w[2 * h], f.w[0].w[2 * h + 1], f.w[1].w[2 * h + 1]};
      mma16816<T>(acc[nb], a, f.x[nb].w[2 * h], f.x[nb].w[2 * h + 1]);
    }
  }
}

// Slices `slices` of y's partial sums, batch tiles of 8 (NB of them); after each slice,
// sink(rows, part) with part(f) the float32 sum of float f = (row - rows.lo) * batch + b. Every
// thread of the block calls it, between barriers. Not inlined: its registers are then allocated
// for it alone (inlined into the op kernel beside the other paths, ptxas spilled 4.9 KB).
template <DType T, int NB, class Sink>
__device__ __noinline__ void stream(const BlockCoop& c, const GemvShape s, const Range slices, Sink& sink) {
  // Steps in flight per warp: about 64 registers of them (a lane's step is 8 + 4 * NB), which is
  // what the loop has to spare around the slice's fold and push without spilling.
  constexpr int kDepth = NB <= 1 ? 8 : NB <= 4 ? 4 : 2;
  const int warp = c.warp(), g = c.lane() / 4, t = c.lane() % 4;
  const uint64_t rowBytes = s.k * 2;
  const auto kSteps = static_cast<uint32_t>(ceilDiv(s.k, kStepK));
  // Steps per warp and slice, a multiple of kDepth: a slice then ends where the unrolled loop
  // does, so its fold and push are one copy of code, not kDepth (the copies overflowed the
  // instruction cache). The padding steps load nothing; they cost a few instructions when k is
  // not a multiple of kWarps * kStepK * kDepth.
  const auto per = static_cast<uint32_t>(ceilDiv(ceilDiv(kSteps, kWarps), kDepth) * kDepth);
  const auto nslices = static_cast<uint32_t>(slices.size());

  // This lane's loads, kept incrementally (the loop is a few instructions per 16-byte load, or
  // it stops being a stream): element `first` + j * kWarps * kStepK of rows g and g + 8 of the
  // slice, for the warp's steps j < live (the rest of a slice's steps fall past k).
  const uint64_t first = uint64_t{kStepK} * warp + 8 * t;
  const uint32_t live = s.k > first ? static_cast<uint32_t>(ceilDiv(s.k - first, uint64_t{kWarps} * kStepK)) : 0;
  uint32_t xLive = 0;  // batch tiles this lane has an x row in
  WEFT_UNROLL
  for (int nb = 0; nb < NB; ++nb) xLive |= (nb * 8 + g < static_cast<int>(s.batch) ? 1u : 0u) << nb;
  uint64_t row = slices.lo * kGemvSliceRows + g;
  const uint8_t* wp = s.w + row * rowBytes + first * 2;
  const uint8_t* xp = s.x + g * rowBytes + first * 2;
  uint32_t loadSlice = 0, loadStep = 0;
  auto load = [&](Frag<NB>& f) {
    const bool on = (loadSlice < nslices) & (loadStep < live);
    f.w[0] = on & (row < s.n) ? loadStreaming16(wp) : Vec16{};
    f.w[1] = on & (row + 8 < s.n) ? loadStreaming16(wp + 8 * rowBytes) : Vec16{};
    WEFT_UNROLL
    for (int nb = 0; nb < NB; ++nb) f.x[nb] = on & ((xLive >> nb) & 1) ? loadShared16(xp + nb * 8 * rowBytes) : Vec16{};
    constexpr uint64_t kAdvance = uint64_t{kWarps} * kStepK * 2;  // bytes between a warp's steps
    wp += kAdvance;
    xp += kAdvance;
    if (++loadStep == per) {
      loadStep = 0;
      ++loadSlice;
      row += kGemvSliceRows;
      wp += kGemvSliceRows * rowBytes - per * kAdvance;
      xp -= per * kAdvance;
    }
  };

  // The warps' sums of a slice, folded: warps 4-7 store theirs in four slots, warps 0-3 add
  // theirs, and the sink reads the four slots.
  float* slot = c.floats();
  const uint32_t pitch = kGemvSliceRows * s.batch;
  float acc[NB][4] = {};
  auto toSlot = [&](float* mine, bool add) {
    WEFT_UNROLL
    for (int nb = 0; nb < NB; ++nb) WEFT_UNROLL
    for (int e = 0; e < 4; ++e) {
      const uint32_t b = nb * 8 + 2 * t + (e & 1);
      if (b < s.batch) {
        float& out = mine[(g + 8 * (e >> 1)) * s.batch + b];
        out = add ? out + acc[nb][e] : acc[nb][e];
      }
      acc[nb][e] = 0.f;
    }
  };
  auto finishSlice = [&](uint64_t m) {
    if (warp >= kWarps / 2) toSlot(slot + (warp - kWarps / 2) * pitch, false);
    c.sync();
    if (warp < kWarps / 2) toSlot(slot + warp * pitch, true);
    c.sync();
    sink(gemvRows(s.n, Range{slices.lo + m, slices.lo + m + 1}),
         [&](uint64_t f) { return (slot[f] + slot[pitch + f]) + (slot[2 * pitch + f] + slot[3 * pitch + f]); });
    c.sync();  // the next slice's sums overwrite the slots
  };

  Frag<NB> ring[kDepth];
  WEFT_UNROLL
  for (int u = 0; u < kDepth; ++u) load(ring[u]);
  for (uint32_t m = 0; m < nslices; ++m) {
    for (uint32_t j = 0; j < per; j += kDepth) {
      WEFT_UNROLL
      for (int u = 0; u < kDepth; ++u) {
        multiply<T, NB>(ring[u], acc);
        load(ring[u]);
      }
    }
    finishSlice(m);
  }
}

// stream() with the batch tiles the batch needs.
template <DType T, class Sink>
__device__ void streamAnyBatch(const BlockCoop& c, const GemvShape& s, Range slices, Sink& sink) {
  if (s.batch <= 8)
    stream<T, 1>(c, s, slices, sink);
  else if (s.batch <= 16)
    stream<T, 2>(c, s, slices, sink);
  else if (s.batch <= 32)
    stream<T, 4>(c, s, slices, sink);
  else
    stream<T, 8>(c, s, slices, sink);
}

}  // namespace gemv
#endif

}  // namespace weft::dev
