// The sm_90a path of the GEMM tile: the copy engine (TMA) loads 64-wide k slices of a and w into
// a 4-stage ring in shared memory, each stage completing on an mbarrier, and the block's two
// warpgroups multiply them with wgmma m64n256k16 (64 rows each, the whole 256 columns). No
// thread issues a load of its own and no barrier stops the block between slices: a warpgroup
// waits only for the slice it is about to multiply. Each warp counts its release of a stage in
// shared memory once its multiply of it is done, and the warp whose release completes the count
// refills the stage, three slices ahead of the multiply being issued. (A single refilling thread
// that waited for both warpgroups held its own warpgroup back whenever the other lagged: the
// release count made the GEMM alone 1-2% faster at k 14336, docs/perf.md, session 14.)
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

#include "../dtype_device.hpp"
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

constexpr int kTmaK = 64, kTmaStages = 4;
constexpr int kTmaABytes = kM * kTmaK * 2;                        // a's slice: kM rows x 64 k
constexpr int kTmaWBlockBytes = kTmaK * 128;                      // w: 64 k rows x 64 columns
constexpr int kTmaStageBytes = kTmaABytes + 4 * kTmaWBlockBytes;  // 48 KB
constexpr int kTmaPipeBytes = kTmaStages * kTmaStageBytes;        // 192 KB
constexpr int kTmaBarrierBytes = 2 * kTmaStages * 8;              // full[] mbarriers, release counts
static_assert(kM * kStagedPitch * 2 <= kTmaPipeBytes, "the staged tile reuses the ring's memory");

#if defined(WEFT_HAVE_WGMMA_TILE)
#define WEFT_HAVE_TMA_TILE 1

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

// The tile at (row0, col0) of a @ w[e] (k deep), staged in `smem` (kTmaPipeBytes + kTmaBarrierBytes,
// 1024-byte aligned) as [kM][kStagedPitch] elements of T, as mmaTile stages it. Every thread of
// the block (kThreads: two warpgroups) calls it.
template <DType T>
__device__ void tmaTile(uint8_t* smem, const GemmMaps& maps, uint64_t k, uint64_t e, uint64_t row0, uint64_t col0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2;
  const uint32_t pipe = sharedAddress(smem);
  const uint32_t full = pipe + kTmaPipeBytes, released = full + kTmaStages * 8;
  const int slices = static_cast<int>((k + kTmaK - 1) / kTmaK);
  constexpr uint32_t kWarps = kThreads / 32;
  auto load = [&](int kt) {
    const uint32_t stage = pipe + (kt % kTmaStages) * kTmaStageBytes, bar = full + (kt % kTmaStages) * 8;
    const auto kk = static_cast<int32_t>(kt * kTmaK);
    barrierExpectBytes(bar, kTmaStageBytes);
    tmaLoad2(stage, maps.a, kk, static_cast<int32_t>(row0), bar);
#pragma unroll
    for (int b = 0; b < 4; ++b)
      tmaLoad3(stage + kTmaABytes + b * kTmaWBlockBytes, maps.w, static_cast<int32_t>(col0 + 64 * b), kk,
               static_cast<int32_t>(e), bar);
  };
  // The ring's memory held the previous tile's staged rows, written and read by ordinary
  // accesses: ordered before the copy engine's writes by a proxy fence in every thread, then the
  // barrier. The mbarriers start afresh each tile (the last tile left none of them pending).
  fenceAsyncShared();
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int s = 0; s < kTmaStages; ++s) {
      barrierInit(full + s * 8, 1);
      storeShared(released + s * 8, 0u);
    }
    fenceBarrierInit();
    for (int kt = 0; kt < kTmaStages && kt < slices; ++kt) load(kt);
  }
  __syncthreads();

  float d[128] = {};
  for (int kt = 0; kt < slices; ++kt) {
    const int s = kt % kTmaStages;
    barrierWait(full + s * 8, (kt / kTmaStages) & 1);
    const uint32_t a = pipe + s * kTmaStageBytes + wg * 64 * 128, w = pipe + s * kTmaStageBytes + kTmaABytes;
    wgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kTmaK / 16; ++ks)
      wgmma256<T>(d, matrixDesc(a + ks * 32, 16, 8 * 128, 1),
                  matrixDesc(w + ks * 16 * 128, kTmaWBlockBytes, 8 * 128, 1));
    wgmmaCommit();
    wgmmaWait<1>();  // the previous slice's multiply is done; this one's runs on
    if (kt == 0) continue;
    // Slice kt - 1's stage is free once all 8 warps' multiplies of it are done: the warp whose
    // release is the 8th refills it with slice kt - 1 + kTmaStages. Nobody waits for a stage.
    const int ps = (kt - 1) % kTmaStages;
    if (lane == 0 && releaseShared(released + ps * 8) % kWarps == kWarps - 1 && kt - 1 + kTmaStages < slices)
      load(kt - 1 + kTmaStages);
  }
  wgmmaWait<0>();
  __syncthreads();  // every multiply is done: the ring becomes the staged tile
  auto* staged = reinterpret_cast<uint32_t*>(smem);
  const int g = lane >> 2, t = lane & 3, row = wg * 64 + (warp & 3) * 16 + g;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    staged[(row * kStagedPitch + j * 8 + 2 * t) / 2] = packPair<T>(d[4 * j], d[4 * j + 1]);
    staged[((row + 8) * kStagedPitch + j * 8 + 2 * t) / 2] = packPair<T>(d[4 * j + 2], d[4 * j + 3]);
  }
  __syncthreads();
}

#endif

}  // namespace weft::dev::tile
