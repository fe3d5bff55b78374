// Partition and heap-layout math: every element is covered exactly once, no two signal words or
// inbox slots overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "device/heap_layout_device.hpp"
#include "device/ops/collectives/allreduce_device.hpp"
#include "device/ops/collectives/allreduce_oneshot_device.hpp"
#include "device/ops/collectives/alltoall_device.hpp"
#include "device/ops/embedding/embedding_alltoall_device.hpp"
#include "device/ops/gemm/gemm_alltoall_device.hpp"
#include "device/ops/partition_device.hpp"

namespace weft::dev {
namespace {

TEST(Partition, ShardsAndTilesCoverEveryElementOnce) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 300; ++trial) {
    const uint64_t count = rng() % 5000;
    const uint32_t nranks = 1 + rng() % 8;
    const uint32_t es = trial % 2 ? 2 : 4;
    const uint64_t tile = 1 + rng() % 300;
    const uint64_t tps = AllReduceOp::tilesPerShard(count, nranks, es, tile);
    std::vector<int> hits(count, 0);
    for (uint32_t s = 0; s < nranks; ++s) {
      const Range r = shardRange(count, nranks, vectorElems(es), s);
      if (r.size() && s + 1 < nranks) {
        EXPECT_EQ(r.lo % vectorElems(es), 0u);
      }
      for (uint64_t t = 0; t < tps; ++t) {
        const Range x = tileRange(r, tile, t);
        ASSERT_LE(x.lo, x.hi);
        ASSERT_LE(x.size(), tile);
        for (uint64_t i = x.lo; i < x.hi; ++i) ++hits[i];
      }
      EXPECT_EQ(tileRange(r, tile, tps).size(), 0u) << "a tile past the last must be empty";
    }
    for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(hits[i], 1) << "element " << i << " count " << count;
  }
}

TEST(Partition, ItemCountsIncludeTheControlItems) {
  EXPECT_EQ(AllReduceOp::numItems(0, 4, 4, 16), 1u);  // only the final wait
  EXPECT_EQ(AllToAllOp::numItems(0, 4, 16), 2u);      // ready signal and final wait
  EXPECT_EQ(AllToAllOp::numItems(33, 3, 16), 2u + 3 * 3);
}

TEST(HeapLayout, NoTwoWordsOrSlotsOverlap) {
  for (uint32_t n : {1u, 2u, 3u, 8u})
    for (uint32_t slots : {1u, 4u}) {
      HeapLayout L{n, slots, 4096};
      std::set<uint64_t> words;
      for (uint32_t p = 0; p < n; ++p) {
        for (int which = 0; which <= static_cast<int>(PeerSignal::kSigOdd); ++which) {
          const uint64_t off = L.peerSignalOffset(static_cast<PeerSignal>(which), static_cast<int>(p));
          EXPECT_EQ(off % 8, 0u);
          EXPECT_TRUE(words.insert(off / kSignalStride).second) << off;
        }
        for (uint32_t s = 0; s < slots; ++s) {
          EXPECT_TRUE(words.insert(L.inboxFlagOffset(p, s) / kSignalStride).second);
          EXPECT_TRUE(words.insert(L.inboxCreditOffset(p, s) / kSignalStride).second);
        }
      }
      const uint64_t firstData = L.inboxDataOffset(0, 0);
      EXPECT_GT(firstData, *words.rbegin() * kSignalStride);
      EXPECT_EQ(firstData % 256, 0u);
      const uint64_t last = L.inboxDataOffset(n - 1, slots - 1) + L.tileBytes;
      EXPECT_LE(last, L.controlBytes());
      EXPECT_EQ(L.controlBytes() % 4096, 0u);
      // The inbox is [peer][slot] tiles, packed: each slot starts where the one before it ends, so
      // no two slots overlap and none is left out.
      uint64_t next = firstData;
      for (uint32_t p = 0; p < n; ++p)
        for (uint32_t s = 0; s < slots; ++s) {
          EXPECT_EQ(L.inboxDataOffset(p, s), next) << "peer " << p << " slot " << s << " of " << slots;
          next += L.tileBytes;
        }
    }
}

TEST(HeapLayout, OneShotScratchAreasAreDisjointAndInsideTheControlArea) {
  for (uint32_t n : {1u, 2u, 5u}) {
    HeapLayout L{n, 2, 4096, 768};
    uint64_t prevEnd = L.inboxDataOffset(n - 1, 1) + L.tileBytes;
    for (uint32_t p = 0; p < n; ++p)
      for (uint32_t parity : {0u, 1u}) {
        const uint64_t at = L.oneShotDataOffset(static_cast<int>(p), parity);
        EXPECT_GE(at, prevEnd);
        EXPECT_EQ(at % 16, 0u) << "line pairs are 16-byte stores";
        EXPECT_GE(L.oneShotScratchBytes(), 2 * L.oneShotBytes) << "flagged lines carry half their size";
        prevEnd = at + L.oneShotScratchBytes();
      }
    EXPECT_LE(prevEnd, L.controlBytes());
  }
}

TEST(HeapLayout, LineAreasFollowTheOneShotScratchAndFitTheirInput) {
  for (uint32_t n : {1u, 2u, 5u}) {
    HeapLayout L{n, 2, 4096, 768};
    EXPECT_GE(L.lineScratchBytes(), linesFor(L.oneShotBytes) * kLineBytes) << "every line of the largest input";
    uint64_t prevEnd = L.oneShotDataOffset(static_cast<int>(n), 0);
    for (uint32_t p = 0; p < n; ++p)
      for (uint32_t parity : {0u, 1u}) {
        const uint64_t at = L.lineDataOffset(static_cast<int>(p), parity);
        EXPECT_GE(at, prevEnd) << "apart from the 8-byte lines";
        EXPECT_EQ(at % kLineBytes, 0u) << "a line is one aligned 128-byte access";
        prevEnd = at + L.lineScratchBytes();
      }
    EXPECT_LE(prevEnd, L.controlBytes());
  }
}

TEST(OneShot, ItemsCoverEveryUnitOnce) {
  for (bool lines : {false, true})
    for (uint64_t bytes : {0ull, 1ull, 7ull, 8ull, 9ull, 119ull, 121ull, 2047ull, 16384ull, 262144ull, 1000001ull}) {
      const uint32_t items = AllReduceOneShotOp::numItems(bytes, lines);
      EXPECT_GE(items, 1u);
      EXPECT_LE(items, AllReduceOneShotOp::kMaxItems);
      uint64_t next = 0;
      for (uint32_t i = 0; i < items; ++i) {
        const Range r = AllReduceOneShotOp::itemUnits(bytes, lines, items, i);
        EXPECT_EQ(r.lo, next) << bytes;
        next = r.hi;
      }
      EXPECT_EQ(next, lines ? linesFor(bytes) : AllReduceOneShotOp::pairs(bytes)) << bytes;
      EXPECT_GE(AllReduceOneShotOp::units(bytes, lines) * (lines ? kLinePayloadBytes : kLlPayloadBytes), bytes);
    }
}

}  // namespace
// What the host packs into a descriptor is what the device reads back.
TEST(OpDesc, GemmAndEmbeddingArgsRoundTrip) {
  const int64_t counts[3] = {}, ends[2] = {};
  int64_t recvCounts[3] = {};
  const uint8_t a[16] = {}, w[16] = {};
  const GemmArgs g{a, w, counts, recvCounts, ends, 300, 64, 264, 900, 2};
  OpDesc d{};
  GemmAllToAllOp::pack(g, d);
  const GemmArgs back = GemmAllToAllOp::args(d);
  EXPECT_EQ(back.a, g.a);
  EXPECT_EQ(back.w, g.w);
  EXPECT_EQ(back.sendCounts, g.sendCounts);
  EXPECT_EQ(back.recvCounts, g.recvCounts);
  EXPECT_EQ(back.expertEnds, g.expertEnds);
  EXPECT_EQ(back.tokens, 300u);
  EXPECT_EQ(back.k, 64u);
  EXPECT_EQ(back.h, 264u);
  EXPECT_EQ(back.capacity, 900u);
  EXPECT_EQ(back.experts, 2u);
  EXPECT_EQ(d.grain, gemmColTiles(264));
  EXPECT_EQ(d.nitems, gemmItems(300, 264));

  const int64_t offsets[3] = {}, indices[2] = {};
  const float weights[2] = {};
  const EmbeddingArgs e{a, counts, indices, offsets, weights, 3, 17, 9, 4, 128, true, false};
  EmbeddingAllToAllOp::pack(e, d);
  const EmbeddingArgs eb = EmbeddingAllToAllOp::args(d);
  EXPECT_EQ(eb.weights, e.weights);
  EXPECT_EQ(eb.tableOffsets, e.tableOffsets);
  EXPECT_EQ(eb.indices, e.indices);
  EXPECT_EQ(eb.offsets, e.offsets);
  EXPECT_EQ(eb.perSampleWeights, e.perSampleWeights);
  EXPECT_EQ(eb.numTables, 3u);
  EXPECT_EQ(eb.localBatch, 17u);
  EXPECT_EQ(eb.totalTables, 9u);
  EXPECT_EQ(eb.tableBase, 4u);
  EXPECT_EQ(eb.dim, 128u);
  EXPECT_TRUE(eb.mean);
  EXPECT_FALSE(eb.check);
}

// The GEMM's tile order visits every tile once, for grids that the row groups divide and for
// ones they do not (a short last group, a single row or column).
TEST(OpLayout, GemmTileOrderIsAPermutation) {
  for (uint64_t rowTiles : {1u, 5u, 16u, 17u, 33u, 128u})
    for (uint64_t cols : {1u, 3u, 28u}) {
      std::vector<int> seen(rowTiles * cols, 0);
      for (uint64_t t = 0; t < rowTiles * cols; ++t) {
        const auto p = GemmAllToAllOp::placeTile(t, rowTiles, cols);
        ASSERT_LT(p.row, rowTiles) << rowTiles << "x" << cols << " t " << t;
        ASSERT_LT(p.col, cols) << rowTiles << "x" << cols << " t " << t;
        ++seen[p.row * cols + p.col];
      }
      for (int s : seen) EXPECT_EQ(s, 1) << rowTiles << "x" << cols;
    }
  // A wave of the grid covers a block of rows, column by column.
  const auto first = GemmAllToAllOp::placeTile(0, 64, 28), second = GemmAllToAllOp::placeTile(1, 64, 28);
  EXPECT_EQ(first.col, second.col);
  EXPECT_EQ(second.row, first.row + 1);
}

// A row tile's parts, as the GEMM visits them (nextExpert from the first expert that reaches
// past the tile's first row), are exactly the experts whose rows meet the tile, empty experts and
// experts ending on the tile's edges included; the ring loads the next part ahead by the same rule.
TEST(OpLayout, GemmTilePartsAreTheExpertsThatMeetTheTile) {
  std::mt19937_64 rng(20261122);
  for (int trial = 0; trial < 400; ++trial) {
    const uint64_t experts = 1 + rng() % 12, tokens = rng() % 700;
    std::vector<int64_t> ends(experts);
    for (auto& e : ends) e = static_cast<int64_t>(rng() % (tokens + 1));
    std::sort(ends.begin(), ends.end());
    if (trial % 4 == 0)  // ends on tile edges
      for (auto& e : ends) e = std::min<int64_t>(static_cast<int64_t>(tokens), e / 128 * 128);
    ends.back() = static_cast<int64_t>(tokens);
    const GemmArgs g{nullptr, nullptr, nullptr, nullptr, ends.data(), tokens, 8, 8, tokens, experts};
    for (uint64_t row0 = 0; row0 < tokens; row0 += GemmAllToAllOp::kTileM) {
      const uint64_t row1 = std::min<uint64_t>(tokens, row0 + GemmAllToAllOp::kTileM);
      std::vector<uint64_t> want, got;
      for (uint64_t e = 0; e < experts; ++e)
        if (std::max<uint64_t>(e ? ends[e - 1] : 0, row0) < std::min<uint64_t>(row1, ends[e])) want.push_back(e);
      uint64_t e = 0;
      while (static_cast<uint64_t>(ends[e]) <= row0) ++e;  // firstExpert's answer
      for (; e < experts; e = GemmAllToAllOp::nextExpert(g, e, row0)) got.push_back(e);
      EXPECT_EQ(got, want) << "trial " << trial << " row0 " << row0;
    }
  }
}

}  // namespace weft::dev
