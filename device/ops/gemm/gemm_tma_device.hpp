// The sm_90a path of the GEMM tile: the copy engine (TMA) loads 64-wide k slices of a and w into
// a 4-stage ring in shared memory, each stage completing on an mbarrier, and the block's two
// warpgroups multiply them with wgmma m64n256k16 (64 rows each, the whole 256 columns). No
// thread issues a load of its own and no barrier stops the block between slices: a warpgroup
// waits only for the slice it is about to multiply. Each warp counts its release of a stage in
// shared memory once its multiply of it is done, and the warp whose release completes the count
// refills the stage, three slices ahead of the multiply being issued. (A single refilling thread
// that waited for both warpgroups held its own warpgroup back whenever the other lagged: the
// release count made the GEMM alone 1-2% faster at k 14336: docs/archive/perf-journal-2026-11.md.)
//
// The ring lives as long as the kernel: its slices are numbered across the block's multiplies,
// and the releases of a multiply's last four slices load the first four of the block's next
// multiply (the caller names it), which so arrive while this one's rows leave. The rows leave
// from the accumulators, a warp's 16 rows by 64 columns at a time through 2 KB of shared memory
// of its own, as whole 128-byte row pieces: no barrier of the block, and the ring is never
// reused for them. (A tile staged in the ring's memory, with the ring set up afresh for every
// multiply, was 1-2.5% slower at k 14336 and within the noise at k 2048: docs/archive/perf-journal-2026-11.md.)
//
// The slices land as the tensor cores read them, with the 128-byte swizzle: a's [128 rows][64 k]
// is K-major (row r at r * 128, 16-byte chunk c at c ^ (r % 8)); w's [64 k][256 columns] is
// N-major, four 64-column blocks of [64 k][128 bytes] swizzled alike. Rows past `tokens`, k past
// `k` and columns past `h` load as zeros (the tensor maps' bounds), so the edges need no code.
//
// The tensor maps come from the host (encodeGemmMaps in gpu_host.cu), by value as a kernel
// parameter: a is 2-D [tokens][k], w 3-D [experts][k][h], so that an expert's slice never reads
// the next expert's rows.
#pragma once

#include <cstdint>

#include "../../dtype_device.hpp"
#include "gemm_split_device.hpp"
#include "gemm_tile_device.hpp"
#include "gemm_wgmma_device.hpp"

namespace weft::dev::tile {

// A CUDA tensor map (CUtensorMap) as the device code carries it: 128 opaque bytes.
struct alignas(64) TensorMap {
  uint64_t words[16];
};
// The GEMM's two maps: a [tokens][k] in boxes of kM x kTmaK, w [experts][k][h] in boxes of
// kTmaK x 64 (one 128-byte swizzle span of columns).
struct GemmMaps {
  TensorMap a, w;
};

// 64-wide slices in 4 stages: 32-wide ones in 8 stages (more bytes in flight, finer refills) made
// the GEMM alone 27% slower (per-slice waits, releases and wgmma groups doubled;
// docs/archive/perf-journal-2026-11.md).
constexpr int kTmaK = 64, kTmaStages = 4;
static_assert(kTmaK == kSplitSliceK, "a split tile's parts are whole slices of the ring");
constexpr int kTmaARowBytes = kTmaK * 2;                          // a's rows are swizzled by this span
constexpr int kTmaABytes = kM * kTmaARowBytes;                    // a's slice: kM rows x kTmaK
constexpr int kTmaWBlockBytes = kTmaK * 128;                      // w: kTmaK rows x 64 columns
constexpr int kTmaStageBytes = kTmaABytes + 4 * kTmaWBlockBytes;  // 48 KB
constexpr int kTmaPipeBytes = kTmaStages * kTmaStageBytes;        // 192 KB
constexpr int kTmaControlBytes = 128;                             // full[] mbarriers, release counts, the RingState
constexpr int kTmaWarpOutBytes = 16 * 128;                        // a warp's 16 rows x 64 columns on their way out
constexpr int kTmaOutBytes = kThreads / 32 * kTmaWarpOutBytes;    // 16 KB
constexpr int kTmaSharedBytes = kTmaPipeBytes + kTmaControlBytes + kTmaOutBytes;  // after pipelineAt

// Where the ring stands between two multiplies (thread 0 keeps it): the number of the next one's
// first slice, how many of its slices are already loading, and whose they are.
struct RingState {
  uint32_t next, ahead;
  TileKey key;
};
static_assert(2 * kTmaStages * 8 + sizeof(RingState) <= kTmaControlBytes, "the ring's control fits");

#if defined(WEFT_HAVE_WGMMA_TILE)
#define WEFT_HAVE_TMA_TILE 1

// A thread's accumulators of the tile between its multiply and its stores: 64 x 256 per
// warpgroup, as wgmma lays them out.
struct Accum {
  float d[128];
};

__device__ inline void barrierInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ inline void barrierExpectBytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits for the phase of parity `parity` to complete. The phases complete as the copy engine
// lands bytes: hardware progress within the block, as bounded as a __syncthreads.
__device__ inline void barrierWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Counts one release of a ring stage at `addr` and returns the count before it. Acquire-release
// within the block: the releasing warp's multiplies of the stage are done (wgmma.wait_group)
// before, and whoever sees the last release overwrites the stage after.
__device__ inline uint32_t releaseShared(uint32_t addr) {
  uint32_t before;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], 1;" : "=r"(before) : "r"(addr) : "memory");
  return before;
}
// Makes the mbarriers' initialisation visible to the copy engine.
__device__ inline void fenceBarrierInit() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ inline Vec16 loadShared16(uint32_t a) {
  Vec16 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "r"(a)
               : "memory");
  return v;
}

__device__ inline void tmaLoad2(uint32_t dst, const TensorMap& map, int32_t x, int32_t y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(dst),
      "l"(&map), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
__device__ inline void tmaLoad3(uint32_t dst, const TensorMap& map, int32_t x, int32_t y, int32_t z, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(dst),
      "l"(&map), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}

// The ring in `smem` (kTmaSharedBytes, 1024-byte aligned): its stages, then the full[] mbarriers,
// the release counts (a word per stage, 8 bytes apart) and the RingState, then the warps' output.
struct Ring {
  uint32_t pipe;
  __device__ explicit Ring(uint8_t* smem) : pipe(sharedAddress(smem)) {}
  __device__ uint32_t stage(uint32_t slice) const { return pipe + slice % kTmaStages * kTmaStageBytes; }
  __device__ uint32_t full(uint32_t slice) const { return pipe + kTmaPipeBytes + slice % kTmaStages * 8; }
  __device__ uint32_t released(uint32_t slice) const {
    return pipe + kTmaPipeBytes + (kTmaStages + slice % kTmaStages) * 8;
  }
  // The phase of a stage's mbarrier that slice `slice` completes.
  __device__ static uint32_t parity(uint32_t slice) { return slice / kTmaStages & 1; }
  __device__ static RingState* state(uint8_t* smem) {
    return reinterpret_cast<RingState*>(smem + kTmaPipeBytes + 2 * kTmaStages * 8);
  }
  __device__ uint32_t out(int warp) const { return pipe + kTmaPipeBytes + kTmaControlBytes + warp * kTmaWarpOutBytes; }
};

// Once per kernel, thread 0, before the block's first barrier: the mbarriers, no slice loading.
__device__ inline void ringInit(uint8_t* smem) {
  const Ring ring(smem);
  for (uint32_t s = 0; s < kTmaStages; ++s) {
    barrierInit(ring.full(s), 1);
    storeShared(ring.released(s), 0u);
  }
  *Ring::state(smem) = RingState{0, 0, TileKey{}};
  fenceBarrierInit();
}

// Thread 0 (which keeps the state): waits for the slices loaded ahead for a multiply that never
// came, so that nothing lands in the ring after the block is done with it (or the kernel ends).
__device__ inline void ringDrain(uint8_t* smem) {
  const Ring ring(smem);
  RingState* st = Ring::state(smem);
  for (uint32_t g = st->next; g < st->next + st->ahead; ++g) barrierWait(ring.full(g), Ring::parity(g));
  st->next += st->ahead;
  st->ahead = 0;
}

// The tile `key` (rows key.row0.., columns key.col0.., expert key.e) of a @ w[e], over its k
// slices, into `acc`; `next`: the block's next multiply if it is known (its first slices load
// during this one), else invalid. Every thread of the block (kThreads: two warpgroups) calls it;
// between two calls the block meets at a barrier (the caller's).
template <DType T>
__device__ void tmaTile(Accum& acc, uint8_t* smem, const GemmMaps& maps, const TileKey& key, const TileKey& next) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2;
  const Ring ring(smem);
  const uint32_t slices = key.slices;
  float(&d)[128] = acc.d;
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  if (slices == 0) return;
  constexpr uint32_t kWarps = kThreads / 32;
  RingState* state = Ring::state(smem);
  uint32_t base = state->next, ahead = state->ahead;
  const uint32_t stale = ahead != 0 && !(state->key == key) ? ahead : 0;  // loaded for another multiply
  base += stale;
  ahead -= stale;
  const uint32_t nextAhead = next.valid ? (next.slices < kTmaStages ? next.slices : kTmaStages) : 0;
  // Slice j of multiply `of` into global slice g's stage.
  auto load = [&](uint32_t g, const TileKey& of, uint32_t j) {
    const auto kk = static_cast<int32_t>((of.k0 + j) * kTmaK);
    const uint32_t stage = ring.stage(g), bar = ring.full(g);
    barrierExpectBytes(bar, kTmaStageBytes);
    tmaLoad2(stage, maps.a, kk, of.row0, bar);
#pragma unroll
    for (int b = 0; b < 4; ++b)
      tmaLoad3(stage + kTmaABytes + b * kTmaWBlockBytes, maps.w, of.col0 + 64 * b, kk, of.e, bar);
  };
  // Global slice g: this multiply's slice g - base, or the next one's first ones, or nothing. A
  // refill's latency is the loop's: its branches pick between loads with their operands in
  // registers (a pointer to either key put them on the stack and cost the loop 4.5%).
  auto issue = [&](uint32_t g) {
    const uint32_t j = g - base;
    if (j < slices)
      load(g, key, j);
    else if (j - slices < nextAhead)
      load(g, next, j - slices);
  };
  __syncthreads();  // every thread has read the state
  if (threadIdx.x == 0) {
    // Slices loaded for another multiply land before their stages take this one's (and before
    // anyone waits on those stages' next phase).
    for (uint32_t g = base - stale; g < base; ++g) barrierWait(ring.full(g), Ring::parity(g));
    *state = RingState{base + slices, nextAhead, next};
    for (uint32_t g = base + ahead; g < base + kTmaStages; ++g) issue(g);
  }
  if (stale) __syncthreads();
  // Slice g's stage is free once all 8 warps' multiplies of it are done: the warp whose release
  // is the 8th refills it with slice g + kTmaStages. Nobody waits for a stage.
  auto release = [&](uint32_t g) {
    if (lane == 0 && releaseShared(ring.released(g)) % kWarps == kWarps - 1) issue(g + kTmaStages);
  };
  for (uint32_t kt = 0; kt < slices; ++kt) {
    const uint32_t g = base + kt;
    barrierWait(ring.full(g), Ring::parity(g));
    const uint32_t a = ring.stage(g) + wg * 64 * kTmaARowBytes, w = ring.stage(g) + kTmaABytes;
    wgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kTmaK / 16; ++ks)
      wgmma256<T>(d, matrixDesc(a + ks * 32, 16, 8 * kTmaARowBytes, kTmaARowBytes == 128 ? 1 : 2),
                  matrixDesc(w + ks * 16 * 128, kTmaWBlockBytes, 8 * 128, 1));
    wgmmaCommit();
    wgmmaWait<1>();  // the previous slice's multiply is done; this one's runs on
    if (kt > 0) release(g - 1);
  }
  wgmmaWait<0>();
  release(base + slices - 1);
}

// Rows [first, last) of the tile in `acc`, columns [0, 8 * chunks), each row r to rowPtr[r] +
// colBytes. Each warp moves its own 16 rows, 64 columns at a time: into its 2 KB of shared memory
// (row r's 16-byte chunk c at c ^ (r % 8), so that neither side's accesses share a bank), then out
// as a lane per 16 bytes, eight lanes per 128-byte row piece.
template <DType T>
__device__ void tmaStoreRows(const Accum& acc, uint8_t* smem, uint8_t* const* rowPtr, uint32_t first, uint32_t last,
                             uint64_t colBytes, uint32_t chunks) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t top = (warp >> 2) * 64 + (warp & 3) * 16;  // the warp's first row of the tile
  if (top >= last || top + 16 <= first) return;
  const uint32_t out = Ring(smem).out(warp);
  const int g = lane >> 2, t = lane & 3, c = lane & 7;
#pragma unroll
  for (uint32_t q = 0; q < kN / 64; ++q) {
    if (q * 8 >= chunks) break;
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const float* x = acc.d + 4 * (q * 8 + jj);
      const uint32_t at = out + ((jj ^ g) << 4) + (t << 2);
      storeShared(at + g * 128, packPair<T>(x[0], x[1]));
      storeShared(at + (g + 8) * 128, packPair<T>(x[2], x[3]));
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t r = (lane >> 3) + 4 * i, row = top + r, chunk = q * 8 + c;
      const Vec16 v = loadShared16(out + r * 128 + ((c ^ (r & 7)) << 4));
      if (row >= first && row < last && chunk < chunks) store16(rowPtr[row] + colBytes + chunk * 16, v);
    }
    __syncwarp();  // read before the next 64 columns overwrite it
  }
}

#else
struct Accum {};
#endif

}  // namespace weft::dev::tile
