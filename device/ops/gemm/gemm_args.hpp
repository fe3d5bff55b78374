// The GEMM + All-to-All's arguments and work-item count, for host code that builds and checks the
// op without its device code.
#pragma once

#include <cstdint>

#include "gemm_split_device.hpp"

namespace weft::dev {

// One data item's output tile: rows of tokens by columns of h.
constexpr uint32_t kGemmTileRows = 128, kGemmTileCols = 256;
static_assert(kSplitPartialFloats == kGemmTileRows * kGemmTileCols, "a split partial holds one tile");

struct GemmArgs {
  const uint8_t* a;
  const uint8_t* w;           // [experts, k, h]; null where productGiven()
  const int64_t* sendCounts;  // [nranks], device
  int64_t* recvCounts;        // [nranks], device, or null
  const int64_t* expertEnds;  // [experts]: rows of expert e end at expertEnds[e]; null for one expert
  uint64_t tokens, k, h, capacity;
  uint64_t experts;
  GemmSplit split = {};       // the last wave's tiles split along k, or none (gemm_split_device.hpp)
  float* partials = nullptr;  // split: the grid's partial slots (kSplitPartialFloats each), then a flag word each
  // Whether `a` already holds the product, [tokens, h] (gemm_path blas: the vendor BLAS
  // multiplied, and the op routes its rows as it routes the tiles it computes). Unambiguous: the
  // API requires w wherever k and h are not 0; a k of 0 multiplies to zeros without reading w, and
  // an h of 0 has no tiles.
  WEFT_HOST_DEVICE bool productGiven() const { return !w && k != 0 && h != 0; }
};

WEFT_HOST_DEVICE constexpr uint64_t gemmColTiles(uint64_t h) { return (h + kGemmTileCols - 1) / kGemmTileCols; }
WEFT_HOST_DEVICE constexpr uint64_t gemmDataTiles(uint64_t tokens, uint64_t h) {
  return (tokens + kGemmTileRows - 1) / kGemmTileRows * gemmColTiles(h);
}
// The op's work items without a split: the route, the data tiles, the finish (a split adds at
// most the grid's worth, checked where it is made). Items are counted in 32 bits.
WEFT_HOST_DEVICE constexpr uint64_t gemmItems(uint64_t tokens, uint64_t h) { return 2 + gemmDataTiles(tokens, h); }

}  // namespace weft::dev
