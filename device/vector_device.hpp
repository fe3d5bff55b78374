// 16-byte vector moves and the float32-accumulating sum of tiles, written so that every thread has
// several independent loads in flight before its first store (a scalar loop whose output may alias
// its inputs waits a full memory latency per element). Portable: on the CPU backend a vector is a
// 16-byte memcpy.
#pragma once

#include <cstdint>
#include <cstring>

#include "dtype_device.hpp"
#include "primitives_device.hpp"

namespace weft::dev {

constexpr int kVecBytes = 16;
constexpr int kUnroll = 4;  // vectors per thread per step

struct alignas(16) Vec16 {
  uint32_t w[4];
};

WEFT_HOST_DEVICE Vec16 load16(const uint8_t* p) {
#if defined(WEFT_BACKEND_CPU)
  Vec16 v;
  memcpy(&v, p, sizeof v);
  return v;
#else
  return *reinterpret_cast<const Vec16*>(p);
#endif
}

WEFT_HOST_DEVICE void store16(uint8_t* p, const Vec16& v) {
#if defined(WEFT_BACKEND_CPU)
  memcpy(p, &v, sizeof v);
#else
  *reinterpret_cast<Vec16*>(p) = v;
#endif
}

// 8-byte moves; p must be 8-byte aligned.
WEFT_HOST_DEVICE uint64_t load8(const uint8_t* p) {
#if defined(WEFT_BACKEND_CPU)
  uint64_t x;
  memcpy(&x, p, sizeof x);
  return x;
#else
  return *reinterpret_cast<const uint64_t*>(p);
#endif
}

WEFT_HOST_DEVICE void store8(uint8_t* p, uint64_t x) {
#if defined(WEFT_BACKEND_CPU)
  memcpy(p, &x, sizeof x);
#else
  *reinterpret_cast<uint64_t*>(p) = x;
#endif
}

WEFT_HOST_DEVICE bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Adds the elements of one vector to acc (8 lanes; float32 uses the first 4).
template <DType T>
WEFT_HOST_DEVICE void accumulate(float* acc, const Vec16& v) {
  if constexpr (T == DType::kFloat32) {
    for (int i = 0; i < 4; ++i) acc[i] += bitsFloat(v.w[i]);
  } else {
    for (int i = 0; i < 8; ++i) {
      const uint16_t h = static_cast<uint16_t>(v.w[i / 2] >> (16 * (i % 2)));
      acc[i] += T == DType::kFloat16 ? halfToFloat(h) : bf16ToFloat(h);
    }
  }
}

template <DType T>
WEFT_HOST_DEVICE Vec16 pack(const float* acc) {
  Vec16 v{};
  if constexpr (T == DType::kFloat32) {
    for (int i = 0; i < 4; ++i) v.w[i] = floatBits(acc[i]);
  } else {
    for (int i = 0; i < 8; ++i) {
      const uint32_t h = T == DType::kFloat16 ? floatToHalf(acc[i]) : floatToBf16(acc[i]);
      v.w[i / 2] |= h << (16 * (i % 2));
    }
  }
  return v;
}

// out[i] = sum over s of src[s][i], i < count, accumulated in float32 in source order. Every
// thread of the group takes part. `out` may be one of the sources (in place).
template <class Coop, DType T>
WEFT_HOST_DEVICE void sumTileAs(const Coop& c, uint8_t* out, const uint8_t* const* src, int nsrc, uint64_t count) {
  constexpr uint32_t es = T == DType::kFloat32 ? 4 : 2;
  constexpr uint32_t per = kVecBytes / es;
  bool vec = aligned16(out);
  for (int s = 0; s < nsrc; ++s) vec = vec && aligned16(src[s]);
  const uint64_t nvec = vec ? count / per : 0;
  const uint64_t stride = static_cast<uint64_t>(c.size()) * kUnroll;
  for (uint64_t v0 = c.rank(); v0 < nvec; v0 += stride) {
    float acc[kUnroll][8] = {};
    for (int s = 0; s < nsrc; ++s) {
      Vec16 x[kUnroll];
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t v = v0 + u * static_cast<uint64_t>(c.size());
        if (v < nvec) x[u] = load16(src[s] + v * kVecBytes);
      }
      for (int u = 0; u < kUnroll; ++u)
        if (v0 + u * static_cast<uint64_t>(c.size()) < nvec) accumulate<T>(acc[u], x[u]);
    }
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t v = v0 + u * static_cast<uint64_t>(c.size());
      if (v < nvec) store16(out + v * kVecBytes, pack<T>(acc[u]));
    }
  }
  // The tail (and unaligned buffers), one element at a time.
  for (uint64_t i = nvec * per + c.rank(); i < count; i += c.size()) {
    float acc = 0.f;
    for (int s = 0; s < nsrc; ++s) acc += loadAsFloat(src[s], i, T);
    storeFromFloat(out, i, T, acc);
  }
}

template <class Coop>
WEFT_HOST_DEVICE void sumTile(const Coop& c, DType t, uint8_t* out, const uint8_t* const* src, int nsrc,
                              uint64_t count) {
  withDType(t, [&](auto tag) { sumTileAs<Coop, decltype(tag)::value>(c, out, src, nsrc, count); });
}

}  // namespace weft::dev
