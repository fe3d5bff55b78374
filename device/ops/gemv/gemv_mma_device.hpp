// The GEMV on tensor cores (CUDA sm_80 and later, bf16/fp16, rows of w and x 16-byte aligned):
// a block streams a run of 32-row slices of w, and its warps keep the memory system busy across
// slice boundaries, because a GEMV's speed is the bytes of w in flight and little else.
//
// mma.sync m16n8k16 computes x . w^T with x as the A operand (the batch is its 16 rows) and w as B
// (8 rows of w are its 8 columns). One warp step covers the slice's 32 rows x 32 k: lane
// (g = lane / 4, t = lane % 4) loads the 16 bytes at k0 + 8t of rows g, g + 8, g + 16 and g + 24,
// and of x rows g and g + 8 — straight from global memory into fragments, no shared memory. That
// works because the sum over k does not care about the order of k: a fragment wants elements
// (2t, 2t + 1) and (2t + 8, 2t + 9) of each row, and we hand it elements 8t..8t+3 of both w and
// x, then 8t+4..8t+7 in a second mma. Each 16-byte load of w is then two B operands as loaded (no
// register moves on the w path, which is all the bytes); x's fragments are assembled once per
// step and serve the four row groups. It serves batches over 8 (batch 1-8 streams w in longer runs
// of each row: gemv_rows_device.hpp; the op picks the stream by batch).
//
// The 8 warps of the block split each slice's k steps (warp w takes steps w, w + 8, ...), and each
// warp keeps kDepth steps of loads in flight in a ring of registers that runs on into the next
// slice: the barriers that fold the warps' partial sums at a slice's end do not drain the memory
// pipe. Loads past k, past the warp's steps or past the batch are predicated off inside the load
// instruction; rows past n read row n - 1, whose sums are never used. The fold is in a fixed order,
// so y is the same bit for bit from run to run.
#pragma once

#include "../../coop_device.hpp"
#include "../../mma_device.hpp"
#include "../partition_device.hpp"
#include "gemv_slices_device.hpp"

namespace weft::dev {

#if defined(WEFT_HAVE_MMA)
namespace gemv {

constexpr int kWarps = 8;                    // the block's warps split a slice's k steps
constexpr uint32_t kStepK = 32;              // k per warp step: 4 lanes x 8 elements
constexpr int kGroups = kGemvSliceRows / 8;  // the slice's 8-row groups of w (the mma's n)

// Slots the fold of the warps' sums uses: 4 where they fit the group's shared floats, else 2.
__device__ inline int foldSlots(uint32_t batch) { return 4 * gemvSliceFloats(batch) <= kCoopFloats ? 4 : 2; }

// Whether a shape runs on tensor cores in a group of kWarps warps (otherwise the portable path runs).
__device__ inline bool fitsShape(DType dt, const GemvShape& s) {
  return dt != DType::kFloat32 && s.k % 8 == 0 && aligned16(s.w) && aligned16(s.x) &&
         2 * gemvSliceFloats(s.batch) <= kCoopFloats;
}
// Whether the tensor-core path applies in group c.
__device__ inline bool fits(const BlockCoop& c, DType dt, const GemvShape& s) {
  return c.warps() == kWarps && fitsShape(dt, s);
}

// One lane's operands of one step: w rows 8 r + g of the slice (in flight kDepth steps ahead),
// and x rows 16 mb + g and 16 mb + g + 8, which L1 serves, loaded as used.
struct WFrag {
  Vec16 w[kGroups];
};
template <int MB>
struct XFrag {
  Vec16 x[MB][2];
};

template <DType T, int MB>
__device__ inline void multiply(const WFrag& wf, const XFrag<MB>& f, float (&acc)[kGroups][MB][4]) {
  WEFT_UNROLL
  for (int mb = 0; mb < MB; ++mb) {
    WEFT_UNROLL
    for (int h = 0; h < 2; ++h) {  // elements 0-3 of each vector, then 4-7
      const uint32_t a[4] = {f.x[mb][0].w[2 * h], f.x[mb][1].w[2 * h], f.x[mb][0].w[2 * h + 1],
                             f.x[mb][1].w[2 * h + 1]};  // x rows g, then g + 8
      WEFT_UNROLL
      for (int r = 0; r < kGroups; ++r) mma16816<T>(acc[r][mb], a, wf.w[r].w[2 * h], wf.w[r].w[2 * h + 1]);
    }
  }
}

// A stream's load cursor: block j (a multiple of the ring's depth) of the `per` steps of the run's
// slice m; a lane's loads carry data in its first `live` steps of each slice.
struct StepCursor {
  uint32_t per, live, nslices;
  uint32_t m = 0, j = 0;
  // Steps of the cursor's block that carry data.
  __device__ int left() const { return m < nslices ? static_cast<int>(live) - static_cast<int>(j) : 0; }
  // To the next block of `depth` steps; true where that starts a slice (the rows move).
  __device__ bool next(uint32_t depth) {
    j += depth;
    if (j < per) return false;
    j = 0;
    ++m;
    return true;
  }
};

// The loop of both streams: a ring of kDepth steps of w in registers that runs on into the next
// slice, so that a slice's end does not drain the memory pipe. load(frag, u, left): step u of the
// cursor's block into frag (data where u < left); aim(): the cursor moved to a new slice;
// multiply(frag, j, on): step j of slice m (data where on); finish(m): slice m's sums are done.
template <int kDepth, class Frag, class Load, class Aim, class Multiply, class Finish>
__device__ inline void ringLoop(StepCursor& cur, Load&& load, Aim&& aim, Multiply&& multiply, Finish&& finish) {
  aim();
  Frag ring[kDepth];
  int n = cur.left();
  WEFT_UNROLL
  for (int u = 0; u < kDepth; ++u) load(ring[u], u, n);
  if (cur.next(kDepth)) aim();
  for (uint32_t m = 0; m < cur.nslices; ++m) {
    for (uint32_t j = 0; j < cur.per; j += kDepth) {
      // The ring holds steps j.. of slice m, with data in the first `had` of them.
      const int had = n;
      n = cur.left();
      WEFT_UNROLL
      for (int u = 0; u < kDepth; ++u) {
        multiply(ring[u], j + u, u < had);
        load(ring[u], u, n);
      }
      if (cur.next(kDepth)) aim();
    }
    finish(m);
  }
}

// Slices `slices` of y's partial sums, MB batch tiles of 16; after each slice, sink(rows, part)
// with part(f) float f of the slice's partial sums (gemvSliceFloats). Every thread of the block
// calls it, between barriers. Not inlined: its registers are then allocated for it alone (inlined
// into the op kernel beside the other paths, ptxas spilled kilobytes). The sink comes by value and
// should capture by value: its state is then this function's own, in registers, not words behind
// a pointer that every store through a generic pointer would make it load again.
template <DType T, int MB, class Sink>
__device__ __noinline__ void stream(const BlockCoop c, const GemvShape s, const Range slices, Sink sink) {
  // Steps in flight per warp (2 KB of w each): 8 KB per warp, 64 KB per SM where the ring fits
  // the registers beside the accumulators.
  constexpr int kDepth = MB <= 2 ? 4 : 2;
  constexpr uint32_t kAdvance = kWarps * kStepK * 2;  // bytes between a warp's steps in a row
  const int warp = c.warp(), g = c.lane() / 4, t = c.lane() % 4;
  const uint64_t rowBytes = s.k * 2;
  const auto kSteps = static_cast<uint32_t>(ceilDiv(s.k, kStepK));
  // Steps per warp and slice, a multiple of kDepth: a slice then ends where the unrolled loop
  // does (one copy of the fold and push, and one cursor update per kDepth steps). The padding
  // steps load nothing.
  const auto per = static_cast<uint32_t>(maxU64(1, ceilDiv(ceilDiv(kSteps, kWarps), kDepth)) * kDepth);
  const auto nslices = static_cast<uint32_t>(slices.size());
  // This lane's loads: element `first` + j * kWarps * kStepK of its rows, for the warp's steps j < live.
  const uint64_t first = uint64_t{kStepK} * warp + 8 * t;
  const uint32_t live =
      s.k > first && s.n > 0 ? static_cast<uint32_t>(ceilDiv(s.k - first, uint64_t{kWarps} * kStepK)) : 0;
  bool xOn[MB][2];
  const uint8_t* xp[MB][2];
  WEFT_UNROLL
  for (int mb = 0; mb < MB; ++mb) WEFT_UNROLL
  for (int h = 0; h < 2; ++h) {
    const uint32_t b = 16 * mb + 8 * h + g;
    xOn[mb][h] = b < s.batch;
    xp[mb][h] = s.x + b * rowBytes + first * 2;
  }
  // The rows of the cursor's slice: wp[r] (row group r).
  StepCursor cur{per, live, nslices};
  const uint8_t* wp[kGroups];
  auto aim = [&] {
    WEFT_UNROLL
    for (int r = 0; r < kGroups; ++r) {
      const uint64_t row = minU64((slices.lo + cur.m) * kGemvSliceRows + 8 * r + g, s.n == 0 ? 0 : s.n - 1);
      wp[r] = s.w + row * rowBytes + first * 2;
    }
  };
  auto loadW = [&](WFrag& f, int u, int left) {
    const uint32_t off = (cur.j + u) * kAdvance;
    WEFT_UNROLL
    for (int r = 0; r < kGroups; ++r) f.w[r] = load16If<true>(wp[r] + off, u < left);
  };
  auto loadX = [&](uint32_t j, bool on) {
    XFrag<MB> f;
    WEFT_UNROLL
    for (int mb = 0; mb < MB; ++mb) WEFT_UNROLL
    for (int h = 0; h < 2; ++h) f.x[mb][h] = load16If<false>(xp[mb][h] + j * kAdvance, on && xOn[mb][h]);
    return f;
  };

  // The warps' sums of a slice, folded in rounds: warps [0, S) store theirs in S slots, then each
  // further group of S warps adds its own, in warp order; the sink reads the S slots. A slot is
  // the slice's layout (gemvSliceFloats) with row j of batch entry b at j ^ 8 (b % 4): the lanes'
  // pairs of rows then spread over every bank (two wavefronts a warp, the least for 256 bytes).
  const uint32_t slot = sharedAddress(c.floats());
  const uint32_t pitch = static_cast<uint32_t>(gemvSliceFloats(s.batch)) * 4;  // bytes per slot
  const int nslots = foldSlots(s.batch);
  float acc[kGroups][MB][4] = {};
  auto toSlot = [&](uint32_t mine, bool add) {
    WEFT_UNROLL
    for (int r = 0; r < kGroups; ++r) WEFT_UNROLL
    for (int mb = 0; mb < MB; ++mb) WEFT_UNROLL
    for (int h = 0; h < 2; ++h) {
      const uint32_t b = 16 * mb + 8 * h + g;
      if (b < s.batch) {
        const uint32_t at = mine + 4 * (b * kGemvSliceRows + ((8 * r + 2 * t) ^ (8 * (b % 4))));
        float2 v = make_float2(acc[r][mb][2 * h], acc[r][mb][2 * h + 1]);
        if (add) {
          const float2 had = loadShared2(at);
          v.x += had.x;
          v.y += had.y;
        }
        storeShared2(at, v);
      }
    }
    WEFT_UNROLL
    for (int r = 0; r < kGroups; ++r) WEFT_UNROLL
    for (int mb = 0; mb < MB; ++mb) WEFT_UNROLL
    for (int e = 0; e < 4; ++e) acc[r][mb][e] = 0.f;
  };
  auto finishSlice = [&](uint64_t m) {
    for (int w0 = 0; w0 < kWarps; w0 += nslots) {
      if (warp >= w0 && warp < w0 + nslots) toSlot(slot + (warp - w0) * pitch, w0 > 0);
      c.sync();
    }
    sink(gemvRows(s.n, Range{slices.lo + m, slices.lo + m + 1}), [&](uint32_t f) {
      const uint32_t b = f / kGemvSliceRows;
      const uint32_t at = slot + 4 * (b * kGemvSliceRows + ((f % kGemvSliceRows) ^ (8 * (b % 4))));
      float sum = loadShared(at);
      for (int i = 1; i < nslots; ++i) sum += loadShared(at + i * pitch);
      return sum;
    });
    c.sync();  // the next slice's sums overwrite the slots
  };

  ringLoop<kDepth, WFrag>(
      cur, loadW, aim, [&](const WFrag& f, uint32_t j, bool on) { multiply<T, MB>(f, loadX(j, on), acc); },
      finishSlice);
}

}  // namespace gemv
#endif

}  // namespace weft::dev
