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

// A shared-memory pointer as its shared-space address (for asm that takes one: ldmatrix, cp.async,
// mbarriers, wgmma descriptors, ld/st.shared).
__device__ inline uint32_t sharedAddress(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Shared memory by its own address space (sharedAddress): a pointer that reaches a function as a
// generic one costs an address-space check per access.
__device__ inline float loadShared(uint32_t a) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
  return v;
}
__device__ inline float2 loadShared2(uint32_t a) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(a) : "memory");
  return v;
}
__device__ inline void storeShared(uint32_t a, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(a), "f"(v) : "memory");
}
__device__ inline void storeShared(uint32_t a, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}
__device__ inline void storeShared2(uint32_t a, float2 v) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(v.x), "f"(v.y) : "memory");
}

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

// 16 bytes of data that stays unchanged while the kernel runs, or zeros where `on` is false: the
// load is predicated inside the instruction, so an address past the end is never touched.
// kStream: read once (not kept in L1); otherwise other warps read it too (kept in L1).
#define WEFT_LOAD16_IF(op)                                                                                    \
  "{\n.reg .pred q;\nsetp.ne.b32 q, %5, 0;\nmov.b32 %0, 0;\nmov.b32 %1, 0;\nmov.b32 %2, 0;\nmov.b32 %3, 0;\n" \
  "@q " op " {%0, %1, %2, %3}, [%4];\n}"
template <bool kStream>
__device__ inline Vec16 load16If(const uint8_t* p, bool on) {
  Vec16 v;
  const auto q = static_cast<uint32_t>(on);
  if constexpr (kStream)
    asm(WEFT_LOAD16_IF("ld.global.nc.L1::no_allocate.v4.u32")
        : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
        : "l"(p), "r"(q));
  else
    asm(WEFT_LOAD16_IF("ld.global.nc.v4.u32")
        : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
        : "l"(p), "r"(q));
  return v;
}
#undef WEFT_LOAD16_IF

// Asks L2 for the 128-byte line at p (through the load/store unit; nothing to wait for).
__device__ inline void prefetchLineL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

}  // namespace weft::dev

#endif
