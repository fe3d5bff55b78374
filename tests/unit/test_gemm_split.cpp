// The GEMM's last wave split along k (device/ops/gemm/gemm_split_device.hpp): every slice of every
// tile is multiplied by exactly one item, every tile has one owner, which adds exactly the
// partials of its tile, and a range's two items run on one block, the partial first.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "device/ops/gemm/gemm_alltoall_device.hpp"
#include "device/ops/gemm/gemm_split_device.hpp"

namespace weft::dev {
namespace {

// Checks the parts of an op of `tiles` tiles of `slices` slices under `split`.
void expectPartsCoverEverySliceOnce(const GemmSplit& split, uint64_t tiles, uint64_t slices) {
  SCOPED_TRACE(::testing::Message() << "tiles " << tiles << " slices " << slices << " split " << split.tiles << " grid "
                                    << split.grid);
  const uint64_t items = GemmSplit::dataItems(tiles, split);
  std::vector<int> hits(tiles * slices, 0), owners(tiles, 0);
  std::vector<std::vector<uint64_t>> partialsOf(tiles), addedBy(tiles);
  for (uint64_t item = 1; item <= items; ++item) {
    const TilePart p = tilePart(split, tiles, slices, item);
    if (!p.valid) continue;
    ASSERT_LT(p.tile, tiles);
    ASSERT_LE(p.k0 + p.slices, slices);
    ASSERT_GT(p.slices, 0u);
    for (uint64_t j = p.k0; j < p.k0 + p.slices; ++j) ++hits[p.tile * slices + j];
    if (!p.owner) {
      EXPECT_TRUE(p.split);
      EXPECT_LT(p.k0 + p.slices, slices) << "a partial never holds its tile's last slice";
      partialsOf[p.tile].push_back(p.range);
      continue;
    }
    ++owners[p.tile];
    EXPECT_EQ(p.k0 + p.slices, slices) << "the owner holds its tile's last slice";
    for (uint64_t r = firstPartial(split, p); r < p.range; ++r)
      if (split.bound(r) != split.bound(r + 1)) addedBy[p.tile].push_back(r);
    if (p.split) {  // its range's partial item (if any) runs on the same block, before it
      const uint64_t whole = tiles - split.tiles;
      EXPECT_EQ(item, whole + 1 + split.grid + p.range);
      EXPECT_EQ(tilePart(split, tiles, slices, item - split.grid).range, p.range);
    }
  }
  for (uint64_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "tile " << i / slices << " slice " << i % slices;
  for (uint64_t t = 0; t < tiles; ++t) {
    EXPECT_EQ(owners[t], 1) << "tile " << t;
    EXPECT_EQ(addedBy[t], partialsOf[t]) << "tile " << t << ": the owner adds exactly its tile's partials";
  }
}

TEST(GemmSplit, EveryPartCoversItsSlicesOnceAndEveryTileHasOneOwner) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 400; ++trial) {
    const uint64_t grid = 2 + rng() % 140, slices = 1 + rng() % 300;
    const uint64_t tiles = 1 + rng() % (4 * grid);
    GemmSplit split;
    if (tiles % grid != 0) {  // forced, whatever planSplit would say: any split must add up
      split.tiles = tiles % grid;
      split.grid = grid;
      split.slices = slices;
    }
    expectPartsCoverEverySliceOnce(split, tiles, slices);
    expectPartsCoverEverySliceOnce(planSplit(tiles, slices, grid), tiles, slices);
  }
}

TEST(GemmSplit, WithoutASplitEveryItemIsAWholeTile) {
  for (uint64_t item = 1; item <= 10; ++item) {
    const TilePart p = tilePart(GemmSplit{}, 10, 7, item);
    EXPECT_TRUE(p.valid && p.owner && !p.split);
    EXPECT_EQ(p.tile, item - 1);
    EXPECT_EQ(p.k0, 0u);
    EXPECT_EQ(p.slices, 7u);
  }
}

// Shapes on 132 SMs (H100 / H200), one column tile of 256 and one row tile of 128 per tile: deep
// k with a wave half full splits; the benchmark's shapes do not (8192 x 14336 x 4096 would save a
// tenth of its last wave, which measured no faster: docs/archive/perf-journal-2026-11.md).
TEST(GemmSplit, OnlyAWaveWorthSplittingIsSplit) {
  const GemmSplit deep = planSplit(4 * 16, 224, 132);  // 512 tokens, k 14336, h 4096
  EXPECT_EQ(deep.tiles, 64u);
  EXPECT_EQ(deep.grid, 132u);
  EXPECT_EQ(deep.slices, 224u);
  EXPECT_FALSE(planSplit(64 * 16, 224, 132).on());  // 8192 tokens, k 14336, h 4096: 100 of 132
  EXPECT_FALSE(planSplit(32 * 28, 32, 132).on());   // 4096 tokens, k 2048, h 7168: 104 of 132
  EXPECT_FALSE(planSplit(128 * 28, 32, 132).on());  // 16384 tokens: 20 of 132, k too short to pay
  EXPECT_FALSE(planSplit(2 * 28, 32, 132).on());    // 256 tokens, k 2048, h 7168: measured slower
  EXPECT_FALSE(planSplit(264, 224, 132).on());      // whole waves
  EXPECT_FALSE(planSplit(133, 224, 132).on());      // 1 tile over 132 ranges: 131 partials to add
  EXPECT_FALSE(planSplit(10, 2, 132).on());         // ranges of under 4 slices
  EXPECT_FALSE(planSplit(10, 224, 1).on());
}

TEST(GemmSplit, TheEngineSplitsOnlyOneExpertsOpsWithAPartialsBuffer) {
  const uint8_t weights[16] = {};
  GemmArgs g{};
  g.w = weights;  // never read here
  g.tokens = 512;
  g.k = 14336;
  g.h = 4096;
  g.experts = 1;
  OpDesc d{};
  GemmAllToAllOp::pack(g, d);
  EXPECT_EQ(d.nitems, 2u + 64u);
  float buffer[1];
  OpDesc none = d;
  GemmAllToAllOp::splitLastWave(none, 132, nullptr);
  EXPECT_EQ(none.nitems, d.nitems);
  OpDesc split = d;
  GemmAllToAllOp::splitLastWave(split, 132, buffer);
  EXPECT_EQ(split.nitems, 2u + 2u * 132u);
  const GemmArgs back = GemmAllToAllOp::args(split);
  EXPECT_EQ(back.split.tiles, 64u);
  EXPECT_EQ(back.split.grid, 132u);
  EXPECT_EQ(back.split.slices, 224u);
  EXPECT_EQ(back.partials, buffer);
  g.experts = 2;
  OpDesc grouped{};
  GemmAllToAllOp::pack(g, grouped);
  GemmAllToAllOp::splitLastWave(grouped, 132, buffer);
  EXPECT_EQ(GemmAllToAllOp::args(grouped).split.tiles, 0u);
  // An op that routes a product it was given (no w) multiplies nothing, so nothing to split; it
  // copies the product in the multiply's tiles.
  g.experts = 1;
  g.w = nullptr;
  EXPECT_TRUE(g.productGiven());
  OpDesc routed{};
  GemmAllToAllOp::pack(g, routed);
  GemmAllToAllOp::splitLastWave(routed, 132, buffer);
  EXPECT_EQ(GemmAllToAllOp::args(routed).split.tiles, 0u);
  EXPECT_EQ(routed.nitems, d.nitems);
  EXPECT_EQ(routed.grain, d.grain);
}

}  // namespace
}  // namespace weft::dev
