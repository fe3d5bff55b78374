// The GEMM's last partial wave, split along k (stream-K). The data tiles go to the blocks in
// strides of the grid, so when the tiles T are not a multiple of the grid G the last wave runs
// R = T mod G tiles on R of G SMs, and every block waits for it: at 512 x 14336 x 4096 on 132 SMs
// the whole op is such a wave, 64 tiles of 224 slices on 64 SMs. Split, the first T - R tiles run
// whole as before, and the last R tiles' k slices (S each, laid end to end tile after tile) are
// cut into G equal ranges, one per block: R * S / G slices instead of S.
//
// A range ends inside at most one tile without reaching its end (R < G, so a range is at most S
// slices long): that part is the range's partial, which its block computes first and leaves as
// float32 in its slot of the engine's partials buffer, flagged with the op's epoch. The part of a
// range that ends at a tile's end is that tile's owner: it computes its slices, then adds the
// partials of the ranges before it that end inside the same tile (in the fixed order b - 1,
// b - 2, ...: the sums are the same bit for bit from run to run), and stores the tile as a whole
// tile is stored. An owner waits only for partials, which never wait: no block waits in a cycle.
//
// Items: 1..T - R are the whole tiles; then G items of the ranges' partials (range b at
// T - R + 1 + b), then G of their owner parts (at T - R + 1 + G + b): item x runs on block x mod G,
// so both of a range's items run on one block, the partial first. Items without a part are empty.
#pragma once

#include "../../primitives_device.hpp"

namespace weft::dev {

constexpr uint32_t kSplitSliceK = 64;                // k per slice (the TMA tile's, gemm_tma_device.hpp)
constexpr uint32_t kSplitPartialFloats = 128 * 256;  // a tile's float32 sums (tile::kM x tile::kN)

struct GemmSplit {
  uint64_t tiles = 0;   // R: the last R data tiles (placement order) are split; 0: none are
  uint64_t grid = 0;    // G: the kernel's blocks, one range each
  uint64_t slices = 0;  // S: k slices per tile
  WEFT_HOST_DEVICE bool on() const { return tiles != 0; }
  // Range b: slices [bound(b), bound(b + 1)) of the split tiles laid end to end.
  WEFT_HOST_DEVICE uint64_t bound(uint64_t b) const { return tiles * slices * b / grid; }
  WEFT_HOST_DEVICE bool empty(uint64_t b) const { return bound(b) == bound(b + 1); }
  // The items of the op's data tiles and parts: whole tiles, then two per range.
  WEFT_HOST_DEVICE static uint64_t dataItems(uint64_t dataTiles, const GemmSplit& s) {
    return s.on() ? dataTiles - s.tiles + 2 * s.grid : dataTiles;
  }
};

// What one data item multiplies: k slices [k0, k0 + slices) of data tile `tile` (placement
// order). A whole tile is its own owner, with no partials to add.
struct TilePart {
  uint64_t tile = 0;
  uint64_t k0 = 0, slices = 0;
  uint64_t range = 0;      // split parts: the range it belongs to
  uint64_t spanStart = 0;  // split parts: the tile's first slice among the split tiles' slices
  bool owner = false;      // stores the tile (after adding the partials of ranges range - 1, ...)
  bool split = false;
  bool valid = false;  // false: an empty item
};

// Data item `item` (1-based, as the op numbers them) of an op with `dataTiles` tiles of `slices`
// slices each.
WEFT_HOST_DEVICE TilePart tilePart(const GemmSplit& s, uint64_t dataTiles, uint64_t slices, uint64_t item) {
  TilePart p;
  const uint64_t whole = s.on() ? dataTiles - s.tiles : dataTiles;
  if (item <= whole) {
    p.tile = item - 1;
    p.slices = slices;
    p.owner = p.valid = true;
    return p;
  }
  const uint64_t at = item - 1 - whole, b = at % s.grid;
  const uint64_t lo = s.bound(b), hi = s.bound(b + 1);
  p.range = b;
  p.split = true;
  // The two parts below are worked out in full each: one helper for both made ptxas spill in the
  // GEMM kernel, whose registers its multiply loop needs.
  if (at < s.grid) {  // the partial: the range's part in the tile where it ends, short of the end
    if (lo == hi || hi % s.slices == 0) return p;
    const uint64_t t = hi / s.slices, start = lo > t * s.slices ? lo : t * s.slices;
    p.tile = whole + t;
    p.spanStart = t * s.slices;
    p.k0 = start - p.spanStart;
    p.slices = hi - start;
    p.valid = true;
    return p;
  }
  const uint64_t end = hi / s.slices * s.slices;  // the last tile end in the range, if any
  if (end <= lo) return p;
  const uint64_t t = end / s.slices - 1, start = lo > t * s.slices ? lo : t * s.slices;
  p.tile = whole + t;
  p.spanStart = t * s.slices;
  p.k0 = start - p.spanStart;
  p.slices = end - start;
  p.owner = p.valid = true;
  return p;
}

// The owner part `p`: the first range whose partial it adds. It adds those of ranges
// [firstPartial, p.range): the ranges before it that end inside its tile (none for a whole tile).
WEFT_HOST_DEVICE uint64_t firstPartial(const GemmSplit& s, const TilePart& p) {
  uint64_t r = p.range;
  if (p.split && p.owner)
    while (r > 0 && s.bound(r) > p.spanStart) --r;
  return r;
}

// The split for an op of `dataTiles` tiles of `slices` k slices on `grid` blocks, or none where
// it would not pay. In slice times: the last wave takes S whole; split, a range takes R * S / G
// slices, plus for each partial its tile's owner adds (up to G / R + 1) the partial's round trip
// through memory: 128 KB written, flagged, waited for and read back, about 6 slice times on H200
// (docs/archive/perf-journal-2026-11.md). Split where that saves a fifth of the wave: where it saved less
// (8192 x 14336 x 4096 on 132 SMs, a tenth) it measured no faster. Ranges of fewer than 4 slices
// are not worth a part.
WEFT_HOST_DEVICE GemmSplit planSplit(uint64_t dataTiles, uint64_t slices, uint64_t grid) {
  GemmSplit s;
  if (grid < 2 || slices == 0) return s;
  const uint64_t r = dataTiles % grid;
  if (r == 0 || r * slices < 4 * grid) return s;
  constexpr uint64_t kPartialCost = 6;
  const uint64_t split = (r * slices + grid - 1) / grid + kPartialCost * (grid / r + 2);
  if (5 * split > 4 * slices) return s;
  s.tiles = r;
  s.grid = grid;
  s.slices = slices;
  return s;
}

}  // namespace weft::dev
