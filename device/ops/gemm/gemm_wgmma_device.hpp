// The sm_90a path of the GEMM tile: the same 128 x 256 tile, k slices and cp.async pipeline as
// the mma.sync path (gemm_tile_device.hpp), but each of the block's two warpgroups multiplies its
// 64 rows by the whole 256 columns with one wgmma m64n256k16 per 16 of k, reading both operands
// from shared memory through descriptors. a's slice is K-major with the 64-byte swizzle (the
// layout the ldmatrix path already uses); w's slice is N-major (w is [k, h], h contiguous) with
// the 128-byte swizzle: 64-column blocks of [32 k rows][128 bytes], chunk c of row r at c ^ (r % 8).
// Only compiled for sm_90a (wgmma is an arch-specific feature).
#pragma once

#include <cstdint>

#include "../../dtype_device.hpp"

namespace weft::dev::tile {

#if defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WEFT_HAVE_WGMMA_TILE 1

// A shared-memory matrix descriptor: start address, leading and stride byte offsets, swizzle
// (1: 128-byte, 2: 64-byte).
__device__ inline uint64_t matrixDesc(uint32_t addr, uint32_t lbo, uint32_t sbo, uint32_t swizzle) {
  return uint64_t{(addr & 0x3ffff) >> 4} | uint64_t{(lbo & 0x3ffff) >> 4} << 16 | uint64_t{(sbo & 0x3ffff) >> 4} << 32 |
         uint64_t{swizzle} << 62;
}

// The 128 accumulator operands of one m64n256 wgmma, and the instruction for element type TYPE
// (accumulating: scale-d is a true predicate; a K-major, b N-major).
#define WEFT_WGMMA_ACCUMULATORS                                                                                       \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),         \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),          \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),         \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),         \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),         \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),         \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),         \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),         \
      "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]),         \
      "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]),         \
      "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]),         \
      "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]),         \
      "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),    \
      "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), \
      "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), \
      "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define WEFT_WGMMA_M64N256K16(TYPE)                                                                                    \
  asm volatile(                                                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                                    \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE                                                     \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "    \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, " \
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, " \
      "%67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, " \
      "%89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, "  \
      "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "   \
      "%127}, %128, %129, p, 1, 1, 0, 1;\n}\n"                                                                         \
      : WEFT_WGMMA_ACCUMULATORS                                                                                        \
      : "l"(descA), "l"(descB), "r"(1))

// d += a (K-major) @ b (N-major) for 64 x 256 x 16; d is this thread's 128 accumulators.
template <DType T>
__device__ inline void wgmma256(float (&d)[128], uint64_t descA, uint64_t descB) {
  if constexpr (T == DType::kBFloat16)
    WEFT_WGMMA_M64N256K16("bf16");
  else
    WEFT_WGMMA_M64N256K16("f16");
}
#undef WEFT_WGMMA_M64N256K16
#undef WEFT_WGMMA_ACCUMULATORS

__device__ inline void wgmmaFence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ inline void wgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup's wgmma are still running.
template <int N>
__device__ inline void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy writes to shared memory (cp.async) visible to wgmma.
__device__ inline void fenceAsyncShared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

#endif

}  // namespace weft::dev::tile
