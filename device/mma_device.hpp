// Warp-level tensor-core instructions (CUDA, sm_80 and later), shared by the GEMM tile and the
// GEMV: mma.sync m16n8k16 with float32 accumulation, and the 16-byte global loads that feed it
// from registers. WEFT_HAVE_MMA is defined where they exist (the device pass of such a build); the
// ops keep a portable path for every other build.
#pragma once

#include "dtype_device.hpp"
#include "vector_device.hpp"

#if defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA) && __CUDA_ARCH__ >= 800
#define WEFT_HAVE_MMA 1

namespace weft::dev {

// d += a . b for one 16 x 8 x 16 step of element type T (bf16 or fp16). Fragments as the PTX ISA
// lays them out for lane (g = lane / 4, t = lane % 4): a = rows g and g + 8 at k 2t and 2t + 8,
// b = column g at k 2t and 2t + 8, d = rows g and g + 8 at columns 2t, 2t + 1.
template <DType T>
__device__ inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (T == DType::kBFloat16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes of data that stays unchanged while the kernel runs (so the loads may move freely),
// streamed once: not kept in L1.
__device__ inline Vec16 loadStreaming16(const uint8_t* p) {
  Vec16 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
      : "l"(p));
  return v;
}

// The same, for data that other warps read too: kept in L1.
__device__ inline Vec16 loadShared16(const uint8_t* p) {
  Vec16 v;
  asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3]) : "l"(p));
  return v;
}

}  // namespace weft::dev

#endif
