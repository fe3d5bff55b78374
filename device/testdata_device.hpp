// Deterministic pseudo-random data for tests and benchmarks: element i of rank r's input for a
// seed, uniform in [-1, 1), computable anywhere (host or device) without storing it, so every rank
// can build the float64 reference of any other rank's contribution.
#pragma once

#include <cstdint>

#include "primitives_device.hpp"

namespace weft::dev {

WEFT_HOST_DEVICE float testValue(uint64_t seed, int rank, uint64_t i) {
  uint64_t z = seed ^ (0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(rank) + 1)) ^ (i * 0xbf58476d1ce4e5b9ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

}  // namespace weft::dev
