// Element types and their float32 conversions. Reductions always accumulate in float32.
#pragma once

#include <cstdint>
#include <cstring>

#include "primitives_device.hpp"

namespace weft::dev {

// Values match weft_dtype_t in weft.h.
enum class DType : uint32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
constexpr uint32_t kNumDTypes = 3;

WEFT_HOST_DEVICE constexpr uint32_t dtypeSize(DType t) { return t == DType::kFloat32 ? 4 : 2; }

// The dtype as a type, for code compiled once per dtype: withDType(t, f) calls f(DTypeTag<T>{})
// for the runtime dtype t, so f reads it as decltype(tag)::value.
template <DType T>
struct DTypeTag {
  static constexpr DType value = T;
};
template <class F>
WEFT_HOST_DEVICE decltype(auto) withDType(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      return f(DTypeTag<DType::kFloat32>{});
    case DType::kFloat16:
      return f(DTypeTag<DType::kFloat16>{});
    default:
      return f(DTypeTag<DType::kBFloat16>{});
  }
}

WEFT_HOST_DEVICE uint32_t floatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
WEFT_HOST_DEVICE float bitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

WEFT_HOST_DEVICE float bf16ToFloat(uint16_t h) { return bitsFloat(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; NaN stays NaN (quiet), infinities stay infinite.
WEFT_HOST_DEVICE uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

WEFT_HOST_DEVICE float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return bitsFloat(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bitsFloat(sign);
    // Subnormal: value = man * 2^-24.
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exp + 112u) << 23) | (man << 13));
}

// Round to nearest even, with overflow to infinity and gradual underflow.
WEFT_HOST_DEVICE uint16_t floatToHalf(float f) {
  uint32_t u = floatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // nan
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: round abs * 2^24 to an integer, to nearest even.
    float scaled = bitsFloat(abs) * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

WEFT_HOST_DEVICE float loadAsFloat(const void* base, uint64_t i, DType t) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DType::kFloat16:
      return halfToFloat(static_cast<const uint16_t*>(base)[i]);
    default:
      return bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
  }
}

WEFT_HOST_DEVICE void storeFromFloat(void* base, uint64_t i, DType t, float v) {
  switch (t) {
    case DType::kFloat32:
      static_cast<float*>(base)[i] = v;
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(base)[i] = floatToHalf(v);
      break;
    default:
      static_cast<uint16_t*>(base)[i] = floatToBf16(v);
      break;
  }
}

}  // namespace weft::dev
