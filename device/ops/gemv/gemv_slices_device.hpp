// The GEMV's data layout, which every part of it shares: w's rows are cut into slices of
// kGemvSliceRows; a compute item streams a run of slices (GemvShape says what it multiplies), and
// each slice's float32 partial sums are the unit the fused op pushes, reduces and stores.
#pragma once

#include <cstdint>

#include "../partition_device.hpp"

namespace weft::dev {

constexpr uint32_t kGemvSliceRows = 32;  // four tensor-core tiles of w rows

struct GemvShape {
  const uint8_t* x;
  const uint8_t* w;
  uint32_t batch;
  uint64_t n;
  uint64_t k;
};

// Rows [lo, hi) of slices [slices.lo, slices.hi), clamped to n.
WEFT_HOST_DEVICE Range gemvRows(uint64_t n, Range slices) {
  return Range{minU64(n, slices.lo * kGemvSliceRows), minU64(n, slices.hi * kGemvSliceRows)};
}

// A slice's float32 partial sums, as a block hands them on and the fused op's exchange carries
// them: batch-major, kGemvSliceRows floats per batch entry (float b * kGemvSliceRows + j - rows.lo
// for row j), the last slice padded to the full length. y is batch-major too, so one batch
// entry's run of floats is a run of y's row: the stores of y are coalesced, and the offsets are
// shifts and masks.
WEFT_HOST_DEVICE constexpr uint64_t gemvSliceFloats(uint32_t batch) { return uint64_t{kGemvSliceRows} * batch; }

}  // namespace weft::dev
