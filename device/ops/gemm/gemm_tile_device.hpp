// One 128 x 256 output tile of a[rows, k] @ w[k, h] on tensor cores (CUDA, sm_80 and later): a
// block of 8 warps, each 64 x 64 of the tile, mma.sync m16n8k16 with float32 accumulation (one
// block per SM: the accumulators take 128 registers per thread). The k loop streams 32-wide
// slices of a and w through a 4-stage cp.async pipeline in shared memory (16-byte chunks,
// XOR-swizzled so that every ldmatrix reads 8 different bank groups); rows past `rows` and
// columns past `h` load as zeros. The tile ends converted to the element type in shared memory
// (staged), so that it leaves as whole 16-byte row chunks: a tile's rows go to whichever ranks
// own them, and peer memory wants full, contiguous stores. On sm_90a the copy engine and wgmma
// compute the same tile instead (gemm_tma_device.hpp), and it leaves from the accumulators.
#pragma once

#include "../../dtype_device.hpp"
#include "../../mma_device.hpp"

namespace weft::dev::tile {

constexpr int kM = 128, kN = 256, kK = 32, kStages = 4, kThreads = 256;
constexpr int kStageBytes = (kM * kK + kK * kN) * 2;  // one slice of a and one of w
constexpr int kPipeBytes = kStages * kStageBytes;     // 96 KB
constexpr int kStagedPitch = kN + 8;                  // staged row in elements (pads off bank conflicts)
static_assert(kM * kStagedPitch * 2 <= kPipeBytes, "the staged tile reuses the pipeline's memory");
constexpr int kPipeAlign = 1024;  // wgmma's 128-byte swizzle repeats every 1024 bytes

// The pipeline's memory in a group memory area that starts at `p`: aligned for the swizzles.
WEFT_HOST_DEVICE uint8_t* pipelineAt(void* p) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + kPipeAlign - 1) & ~uintptr_t{kPipeAlign - 1});
}

// One multiply of a block: the tile at rows row0.., columns col0.. of a @ w[e], over k slices
// [k0, k0 + slices) (the sm_90a tile loads the next one's first slices during the current one:
// gemm_tma_device.hpp; a split tile's parts each take some of its slices: gemm_split_device.hpp).
struct TileKey {
  int32_t e, row0, col0;
  uint32_t valid;
  uint32_t k0, slices;
  WEFT_HOST_DEVICE bool operator==(const TileKey& o) const {
    return e == o.e && row0 == o.row0 && col0 == o.col0 && valid == o.valid && k0 == o.k0 && slices == o.slices;
  }
};

#if defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA) && __CUDA_ARCH__ >= 800
#define WEFT_HAVE_MMA_TILE 1

// 16 bytes into shared memory, or zeros when !valid (src is then not read).
__device__ inline void copyAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ inline void commitAsync() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ inline void waitAsync() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// a slice: [kM rows][4 chunks], chunk c of row r at c ^ ((r >> 1) & 3): the 8 rows one ldmatrix
// phase reads fall on 8 different bank groups.
__device__ inline uint32_t aChunk(int r, int c) { return r * 64 + ((c ^ ((r >> 1) & 3)) << 4); }
// w slice for ldmatrix: [kK rows][32 chunks], chunk c of row r at c ^ (r % 8).
__device__ inline uint32_t wChunk(int r, int c) { return kM * kK * 2 + r * kN * 2 + ((c ^ (r & 7)) << 4); }

__device__ inline void loadMatrix4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ inline void loadMatrix4Trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Two floats as two elements of T (lo in the low half).
template <DType T>
__device__ inline uint32_t packPair(float lo, float hi) {
  uint32_t out;
  if constexpr (T == DType::kBFloat16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
  return out;
}

// Where one thread's 16-byte chunks of every k slice come from (2 of a's, 4 of w's) and go to,
// worked out once per tile.
struct SliceLoader {
  static constexpr int kA = kM * 4 / kThreads, kW = kK * (kN / 8) / kThreads, kWRows = kThreads / (kN / 8);
  const uint8_t* a[kA];
  const uint8_t* w[kW];
  bool aRow[kA], wCol[kW];
  uint32_t aDst[kA], wDst[kW];
  int aK, wK;  // this thread's first k of a slice: its a chunk's, its first w row's
  uint64_t k, wStride;

  __device__ SliceLoader(const uint8_t* aBase, const uint8_t* wBase, uint64_t rows, uint64_t kk, uint64_t h,
                         uint64_t row0, uint64_t col0)
      : k(kk), wStride(uint64_t{kK} * h * 2) {
    const int t = threadIdx.x;
    aK = (t & 3) * 8;
    for (int u = 0; u < kA; ++u) {
      const int r = (t >> 2) + u * (kThreads / 4);
      aRow[u] = row0 + r < rows;
      a[u] = aBase + ((aRow[u] ? row0 + r : 0) * k + aK) * 2;
      aDst[u] = aChunk(r, t & 3);
    }
    wK = t / (kN / 8);
    const int c = t % (kN / 8);
    for (int u = 0; u < kW; ++u) {
      const int r = wK + u * kWRows;
      wCol[u] = col0 + c * 8 < h;
      w[u] = wBase + (static_cast<uint64_t>(r) * h + (wCol[u] ? col0 + c * 8 : 0)) * 2;
      wDst[u] = wChunk(r, c);
    }
  }
  // Issues the loads of k slice `kt` into the stage at shared address `stage`.
  __device__ void load(uint32_t stage, int kt) const {
    const uint64_t kk = static_cast<uint64_t>(kt) * kK;
#pragma unroll
    for (int u = 0; u < kA; ++u) copyAsync16(stage + aDst[u], a[u] + kk * 2, aRow[u] && kk + aK < k);
#pragma unroll
    for (int u = 0; u < kW; ++u) copyAsync16(stage + wDst[u], w[u] + kt * wStride, wCol[u] && kk + wK + u * kWRows < k);
  }
};

// The tile at (row0, col0) of a[rows, k] @ w[k, h], staged in `smem` (kPipeBytes, 16-byte
// aligned) as [kM][kStagedPitch] elements of T. Every thread of the block (kThreads) calls it.
template <DType T>
__device__ void mmaTile(uint8_t* smem, const uint8_t* a, const uint8_t* w, uint64_t rows, uint64_t k, uint64_t h,
                        uint64_t row0, uint64_t col0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp >> 2, wn = warp & 3;  // the warp's 64 x 64 of the tile
  float acc[4][8][4] = {};
  const int slices = static_cast<int>((k + kK - 1) / kK);
  const SliceLoader loader(a, w, rows, k, h, row0, col0);
  const uint32_t pipe = sharedAddress(smem);
  constexpr int kAhead = kStages - 1;  // slices loaded ahead
  for (int s = 0; s < kAhead; ++s) {
    if (s < slices) loader.load(pipe + s * kStageBytes, s);
    commitAsync();
  }
  for (int kt = 0; kt < slices; ++kt) {
    waitAsync<kAhead - 1>();
    // Slice kt is in, and every warp is done reading the stage the next load refills (in the
    // previous slice).
    __syncthreads();
    if (kt + kAhead < slices) loader.load(pipe + ((kt + kAhead) % kStages) * kStageBytes, kt + kAhead);
    commitAsync();
    const uint32_t base = pipe + (kt % kStages) * kStageBytes;
#pragma unroll
    for (int ks = 0; ks < kK / 16; ++ks) {
      uint32_t af[4][4], bf[4][4];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
        loadMatrix4(base + aChunk(wm * 64 + mi * 16 + (lane & 15), ks * 2 + (lane >> 4)), af[mi]);
#pragma unroll
      for (int nj = 0; nj < 4; ++nj)
        loadMatrix4Trans(base + wChunk(ks * 16 + (lane & 15), wn * 8 + nj * 2 + (lane >> 4)), bf[nj]);
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 8; ++ni)
          mma16816<T>(acc[mi][ni], af[mi], bf[ni >> 1][(ni & 1) * 2], bf[ni >> 1][(ni & 1) * 2 + 1]);
    }
  }
  waitAsync<0>();
  __syncthreads();  // the pipeline's memory becomes the staged tile
  auto* staged = reinterpret_cast<uint32_t*>(smem);
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 8; ++ni) {
      const int row = wm * 64 + mi * 16 + g, col = wn * 64 + ni * 8 + 2 * t;
      staged[(row * kStagedPitch + col) / 2] = packPair<T>(acc[mi][ni][0], acc[mi][ni][1]);
      staged[((row + 8) * kStagedPitch + col) / 2] = packPair<T>(acc[mi][ni][2], acc[mi][ni][3]);
    }
  __syncthreads();
}

#endif

}  // namespace weft::dev::tile
