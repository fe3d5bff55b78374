// How an op's elements are split into per-rank shards and tiles. Host and device compute the
// same split, so both sides of every channel agree on tile counts without talking.
#pragma once

#include <cstdint>

#include "../primitives_device.hpp"

namespace weft::dev {

struct Range {
  uint64_t lo = 0;
  uint64_t hi = 0;  // exclusive; lo == hi is an empty range
  WEFT_HOST_DEVICE uint64_t size() const { return hi - lo; }
};

WEFT_HOST_DEVICE constexpr uint64_t ceilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
WEFT_HOST_DEVICE constexpr uint64_t minU64(uint64_t a, uint64_t b) { return a < b ? a : b; }
WEFT_HOST_DEVICE constexpr uint64_t maxU64(uint64_t a, uint64_t b) { return a < b ? b : a; }

// Elements per shard: an equal split rounded up to `align` elements, so every shard but the last
// starts 16-byte aligned.
WEFT_HOST_DEVICE uint64_t shardElems(uint64_t count, uint32_t nranks, uint64_t align) {
  return ceilDiv(ceilDiv(count, nranks), align) * align;
}

WEFT_HOST_DEVICE Range shardRange(uint64_t count, uint32_t nranks, uint64_t align, uint32_t shard) {
  uint64_t per = shardElems(count, nranks, align);
  return Range{minU64(count, per * shard), minU64(count, per * (shard + 1))};
}

// Tile t of a range, clamped: tiles past the end are empty.
WEFT_HOST_DEVICE Range tileRange(Range r, uint64_t tileElems, uint64_t t) {
  return Range{minU64(r.hi, r.lo + t * tileElems), minU64(r.hi, r.lo + (t + 1) * tileElems)};
}

// Elements per 16 bytes: the alignment unit of shards.
WEFT_HOST_DEVICE constexpr uint64_t vectorElems(uint32_t elemBytes) { return 16 / elemBytes; }

}  // namespace weft::dev
