// Fused GEMM + All-to-All, the output side of a Mixture-of-Experts layer: out = a[tokens, k] @
// w[k, h] (with several experts, rows [offsets[e - 1], offsets[e]) use w[e]), where the rows of `a`
// are grouped by destination rank (send_counts, in device memory) and every row goes straight
// into its destination's recv at its final place: sources in rank order, as all_to_all_single
// with output splits lays them out.
//
// Work items: item 0 publishes this rank's send_counts, capacity and input checks to every rank
// (gemm_route_device.hpp), which also says that its output is free for this op. Items 1..T each
// compute one 128 x 256 output tile (tensor cores on CUDA: gemm_tma_device.hpp on sm_90a,
// gemm_tile_device.hpp before) and only then read the route, whose rows have long arrived by
// then: so no tile waits before its compute. The tile's rows leave as 16-byte stores into the
// ranks that own them. Per destination, this rank counts the rows x column tiles it has stored
// (a word the op's last item zeroes again; on a GPU a block counts a tile's rows after its next
// multiply, see settle()); the count that completes a destination tells it so (kGemmDone =
// epoch). The last item fails the op if the route is unsound (the same verdict on every rank,
// and nothing was stored anywhere), or else fills recv_counts, tells the destinations it sends
// nothing that it is done, and waits for every source's word.
#pragma once

#include "../../comm_device.hpp"
#include "../../dtype_device.hpp"
#include "../../signature_device.hpp"
#include "../../vector_device.hpp"
#include "gemm_args.hpp"
#include "gemm_route_device.hpp"
#include "gemm_split_device.hpp"
#include "gemm_tile_device.hpp"
#include "gemm_tma_device.hpp"

namespace weft::dev {

struct GemmAllToAllOp {
  static constexpr uint32_t kTileM = kGemmTileRows, kTileN = kGemmTileCols;
  static_assert(static_cast<uint32_t>(tile::kM) == kTileM && static_cast<uint32_t>(tile::kN) == kTileN,
                "the multiply computes one item's tile");
  // Vectors in flight per thread where the op copies a product it was given: a tile's 64 KB in
  // four rounds of a block's 128 threads. (The copy keeps the multiply's tiles: in tiles a
  // quarter as wide, each item's count, a system-scope release that waits for its stores,
  // cost more than the wider spread over the SMs saved; docs/perf.md.)
  static constexpr int kCopyUnroll = 8;
  // Group memory: the route, a tile's row pointers, the route's tag, the rows not yet counted
  // (int64 words).
  static_assert(routeWords(kRouteMaxRanks) + kTileM + 3 <= kCoopFloats / 2, "the route fits the coop's scratch");

  // OpDesc fields: send = a, count = h, recv = recv's heap offset, grain = column tiles,
  // args.gemm the rest (expertEnds 0 with one expert; partials 0: no split).
  WEFT_HOST_DEVICE static GemmArgs args(const OpDesc& d) {
    const GemmOpArgs& m = d.args.gemm;
    GemmSplit split;
    if (m.partials) {
      split.tiles = m.split & 0xffffffffu;
      split.grid = m.split >> 32;
      split.slices = ceilDiv(m.k, kSplitSliceK);
    }
    return GemmArgs{reinterpret_cast<const uint8_t*>(d.send),
                    reinterpret_cast<const uint8_t*>(m.w),
                    reinterpret_cast<const int64_t*>(m.sendCounts),
                    reinterpret_cast<int64_t*>(m.recvCounts),
                    reinterpret_cast<const int64_t*>(m.expertEnds),
                    m.tokens,
                    m.k,
                    d.count,
                    m.capacity,
                    m.experts,
                    split,
                    reinterpret_cast<float*>(m.partials)};
  }
  // The inverse of args(), with the tiling: every field but kind, dtype and recv.
  WEFT_HOST_DEVICE static void pack(const GemmArgs& g, OpDesc& d) {
    d.send = reinterpret_cast<uint64_t>(g.a);
    d.count = g.h;
    GemmOpArgs& m = d.args.gemm;
    m.w = reinterpret_cast<uint64_t>(g.w);
    m.sendCounts = reinterpret_cast<uint64_t>(g.sendCounts);
    m.recvCounts = reinterpret_cast<uint64_t>(g.recvCounts);
    m.tokens = g.tokens;
    m.k = g.k;
    m.capacity = g.capacity;
    m.experts = g.experts;
    m.expertEnds = reinterpret_cast<uint64_t>(g.expertEnds);
    m.partials = reinterpret_cast<uint64_t>(g.partials);
    m.split = g.split.tiles | g.split.grid << 32;
    d.grain = static_cast<uint32_t>(gemmColTiles(g.h));
    d.nitems = static_cast<uint32_t>(2 + GemmSplit::dataItems(gemmDataTiles(g.tokens, g.h), g.split));
  }
  // The op `d` (packed) on a grid of `grid` blocks with `partials` (partialsBytes(grid), zeroed
  // when allocated): its last wave split along k where that pays (gemm_split_device.hpp). Only for
  // the sm_90a tile, whose ring takes any range of slices, and for one expert (a split tile's
  // parts would otherwise each cross the experts' rows).
  WEFT_HOST_DEVICE static void splitLastWave(OpDesc& d, uint32_t grid, float* partials) {
    GemmArgs g = args(d);
    if (g.experts != 1 || !partials || g.productGiven()) return;
    g.split = planSplit(gemmDataTiles(g.tokens, g.h), ceilDiv(g.k, kSplitSliceK), grid);
    if (!g.split.on() || 2 + GemmSplit::dataItems(gemmDataTiles(g.tokens, g.h), g.split) > 0xffffffffu) return;
    g.partials = partials;
    pack(g, d);
  }
  // What data item `item` multiplies (gemm_split_device.hpp).
  WEFT_HOST_DEVICE static TilePart partOf(const GemmArgs& g, uint64_t item) {
    return tilePart(g.split, gemmDataTiles(g.tokens, g.h), ceilDiv(g.k, kSplitSliceK), item);
  }
  WEFT_HOST_DEVICE static uint64_t partialsBytes(uint32_t grid) {
    return uint64_t{grid} * (kSplitPartialFloats * sizeof(float) + sizeof(uint64_t));
  }

  // Where data tile t of rowTiles x cols goes. The tiles run about a grid's worth at a time, in
  // item order: row-major, each such wave would read all of w and, with a short k, read it
  // again from memory every wave (w is larger than the L2 share it gets). So the rows are taken
  // kGroupRows at a time and each group column by column: a wave reads kGroupRows row tiles of
  // a and a few column tiles of w, and w is read once per group. 32 rather than 8 or 16: a wave
  // then also spans more destinations (4096 tokens: 32 row tiles, all four ranks' rows), and the
  // fused op ran 6% faster there (docs/archive/perf-journal-2026-11.md).
  struct TilePlace {
    uint64_t row, col;
  };
  static constexpr uint64_t kGroupRows = 32;
  WEFT_HOST_DEVICE static TilePlace placeTile(uint64_t t, uint64_t rowTiles, uint64_t cols) {
    const uint64_t group = t / (kGroupRows * cols), in = t % (kGroupRows * cols);
    const uint64_t rows = minU64(kGroupRows, rowTiles - group * kGroupRows);  // the last group's may be fewer
    return TilePlace{group * kGroupRows + in % rows, in / rows};
  }

  // Rank r starts at the row tiles an even split would send to rank r + 1, and so on around: the
  // ranks' tiles at any moment go to different ranks instead of all to rank 0 first (any order is
  // correct; this one only spreads the traffic). Data tile t's first row and column (t: placement
  // order, tilePart's).
  struct TileAt {
    uint64_t row0, col0;
  };
  WEFT_HOST_DEVICE static TileAt tileAt(const CommView& v, const OpDesc& d, uint64_t tokens, uint64_t t) {
    const uint64_t rowTiles = ceilDiv(tokens, kTileM);
    const TilePlace place = placeTile(t, rowTiles, d.grain);
    const uint64_t shift = rowTiles * static_cast<uint64_t>(v.rank + 1) / static_cast<uint64_t>(v.nranks);
    return TileAt{((place.row + shift) % rowTiles) * kTileM, place.col * kTileN};
  }

  // `maps`: the tensor maps of a and w, where the tile loads through them (sm_90a; the kernel's
  // parameter), else null. kMultiply false: the op as it runs when given the product (`w` null),
  // compiled without the multiply, for a kernel of its own (gpu/gemm_kernel.cu: gemmRouteKernel).
  template <class Coop, bool kMultiply = true>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq, uint32_t item,
                                     const tile::GemmMaps* maps = nullptr) {
    if (item == 0) return publish(c, v, d, seq);
    if (item + 1 == d.nitems) return finish(c, v, d, seq, item);
    return dataTile<Coop, kMultiply>(c, v, d, seq, item, maps);
  }

  // The group's memory keeps the route between the items a group runs: the word after the row
  // pointers says which op's route it holds (only sound ones are kept). The tag mixes in a
  // constant so that what other ops leave in that memory does not pass for one.
  WEFT_HOST_DEVICE static int64_t* routeTag(const RouteView& r) { return r.words + routeWords(r.nranks) + kTileM; }
  // Rows [p[0], p[1]) of the block's last stored part, not yet counted (GPU; see settle()).
  WEFT_HOST_DEVICE static int64_t* uncounted(const RouteView& r) { return routeTag(r) + 1; }
  // What the GEMM kernel sets before its first item: no route, nothing uncounted.
  WEFT_HOST_DEVICE static void startGroup(const RouteView& r) {
    *routeTag(r) = 0;
    uncounted(r)[0] = uncounted(r)[1] = 0;
  }
  WEFT_HOST_DEVICE static int64_t routeTagOf(const OpSeq& seq) {
    return static_cast<int64_t>(seq.epoch ^ 0x6a09e667f3bcc908ull);
  }

 private:
  // Item 0: this rank's row of the route, to every rank (itself included).
  template <class Coop>
  WEFT_HOST_DEVICE static Status publish(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq) {
    const GemmArgs g = args(d);
    const int n = v.nranks;
    auto* row = reinterpret_cast<int64_t*>(c.floats());
    for (int j = c.rank(); j < n; j += c.size()) row[j] = g.sendCounts[j];
    bool badExperts = false;
    if (g.expertEnds)
      for (uint64_t e = c.rank(); e < g.experts; e += c.size()) {
        const int64_t lo = e ? g.expertEnds[e - 1] : 0, hi = g.expertEnds[e];
        badExperts |= lo < 0 || hi < lo || (e + 1 == g.experts && hi != static_cast<int64_t>(g.tokens));
      }
    badExperts = c.any(badExperts);  // also publishes row[] to the leader
    if (c.leader()) {
      int64_t sum = 0;
      bool bad = false;
      for (int j = 0; j < n; ++j) {
        bad |= row[j] < 0 || row[j] > static_cast<int64_t>(g.tokens);
        sum += row[j] < 0 ? 0 : row[j];
      }
      bad |= sum != static_cast<int64_t>(g.tokens);
      row[n + kRouteCapacity] = static_cast<int64_t>(g.capacity);
      row[n + kRouteFlags] = (bad ? kRouteBadCounts : 0) | (badExperts ? kRouteBadExperts : 0);
      row[n + kRouteRecv] = static_cast<int64_t>(d.recv);
      row[n + kRouteSig] = static_cast<int64_t>(d.sig);
    }
    c.sync();
    // Under the plain flag (signature 0, opSeq): the route carries the signature in its row
    // instead, so that every rank reads every row and reaches the same verdict (gemm_route_device.hpp).
    const Status st = pushFlagged(c, v, seq, Range{0, static_cast<uint64_t>(n) + kRouteExtra}, /*toSelf=*/true,
                                  [&](uint64_t k) { return static_cast<uint64_t>(row[k]); });
    // The route's verdict finds a GEMM peer that disagrees; the word is for a peer that runs
    // another op here, whose waits compare it (without it, that peer waited for its timeout).
    if (st != Status::kOk || d.sig == 0) return st;
    return publishSigAfterData(c, v, sigWord(runningOpMeet(), d.sig), seq.op, 0);
  }

  WEFT_HOST_DEVICE static uint64_t expertEnd(const GemmArgs& g, uint64_t e) {
    return g.expertEnds ? static_cast<uint64_t>(g.expertEnds[e]) : g.tokens;
  }

 public:
  // The expert after e with rows in the row tile from row0, or g.experts if none (the experts'
  // rows follow each other: the search stops at the first that reaches past the tile).
  WEFT_HOST_DEVICE static uint64_t nextExpert(const GemmArgs& g, uint64_t e, uint64_t row0) {
    const uint64_t row1 = minU64(g.tokens, row0 + kTileM);
    for (uint64_t f = e; f + 1 < g.experts && expertEnd(g, f) < row1; ++f)
      if (maxU64(expertEnd(g, f), row0) < minU64(row1, expertEnd(g, f + 1))) return f + 1;
    return g.experts;
  }

 private:
  // The first expert whose rows reach past `row` (leader: a binary search; the offsets are
  // checked by item 0, and until the verdict says they are sound any answer in range will do).
  template <class Coop>
  WEFT_HOST_DEVICE static uint64_t firstExpert(const Coop& c, const GemmArgs& g, uint64_t row) {
    if (!g.expertEnds) return 0;
    uint64_t e = 0;
    if (c.leader()) {
      uint64_t lo = 0, hi = g.experts - 1;
      while (lo < hi) {
        const uint64_t mid = (lo + hi) / 2;
        if (static_cast<int64_t>(g.expertEnds[mid]) > static_cast<int64_t>(row))
          hi = mid;
        else
          lo = mid + 1;
      }
      e = lo;
    }
    return c.broadcast(e);
  }

  template <class Coop, bool kMultiply>
  WEFT_HOST_DEVICE static Status dataTile(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                          uint32_t item, const tile::GemmMaps* maps) {
    const GemmArgs g = args(d);
    const TilePart part = partOf(g, item);
    if (part.valid) {
      const Status st = multiplyPart<Coop, kMultiply>(c, v, d, seq, item, maps, g, part);
      if (st != Status::kOk) return st;
    }
#if defined(WEFT_DEVICE_PASS)
    // The block's last data item (items go to blocks in strides of the grid, the op's last item
    // excepted): nothing of its own follows to count its last part, so count it now.
    if (item + gridDim.x + 1 >= d.nitems) {
      c.sync();
      if (c.leader()) countUncounted(v, seq, RouteView{reinterpret_cast<int64_t*>(c.floats()), v.nranks}, d.grain);
    }
#endif
    return Status::kOk;
  }

  // The tile part's multiply; then, for a tile's owner, its rows into the ranks that own them.
  // !kMultiply: only the copy of a given product's rows (no split either: splitLastWave leaves
  // such an op whole).
  template <class Coop, bool kMultiply>
  WEFT_HOST_DEVICE static Status multiplyPart(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                              uint32_t item, const tile::GemmMaps* maps, const GemmArgs& g,
                                              const TilePart& part) {
    const DType dt = static_cast<DType>(d.dtype);
    const uint64_t es = dtypeSize(dt), cols = d.grain;
    const TileAt at = tileAt(v, d, g.tokens, part.tile);
    const uint64_t row0 = at.row0, col0 = at.col0;
    const uint64_t row1 = minU64(g.tokens, row0 + kTileM), col1 = minU64(g.h, col0 + kTileN);
    const RouteView r{reinterpret_cast<int64_t*>(c.floats()), v.nranks};
    auto* rowPtr = reinterpret_cast<uint8_t**>(r.words + routeWords(v.nranks));
    RouteVerdict verdict;
    bool routed = *routeTag(r) == routeTagOf(seq);  // a sound route of this op, read by an earlier tile
    for (uint64_t e = firstExpert(c, g, row0); e < g.experts; e = nextExpert(g, e, row0)) {
      const uint64_t lo = e ? expertEnd(g, e - 1) : 0;
      const uint64_t eLo = maxU64(lo, row0), eHi = minU64(row1, expertEnd(g, e));
      if (eLo < eHi) {
        const uint8_t* w = g.w + e * g.k * g.h * es;
        tile::Accum acc;
        if constexpr (kMultiply)
          if (!g.productGiven()) computeTile(c, v, d, dt, g, maps, item, e, w, row0, col0, part, acc);
#if defined(WEFT_DEVICE_PASS)
        if (c.leader()) countUncounted(v, seq, r, cols);  // the last part's stores drained meanwhile
#endif
        if (kMultiply && part.split) {
          if (!part.owner) return leavePartial(c, g, seq, part, acc);
          // After the multiply: the ranges before this one computed their partials alongside this
          // block's own, and waiting first would hold this multiply back by up to a whole range.
          if (const Status st = awaitPartials(c, v, seq, item, g, part); st != Status::kOk) return st;
          addPartials(g, part, acc);
        }
        if (!routed) {
          const Status st = readRoute(c, v, seq, item, r, &verdict);
          if (st != Status::kOk) return st;
          routed = true;
          c.sync();
          if (c.leader() && verdict.ok()) *routeTag(r) = routeTagOf(seq);
        }
        if (!verdict.ok()) return Status::kOk;  // nothing moves; the last item fails the op
        for (uint64_t i = eLo - row0 + c.rank(); i < eHi - row0; i += c.size()) {
          const auto row = static_cast<int64_t>(row0 + i);
          const int dest = r.destOf(row);
          rowPtr[i] = v.at(dest, d.recv) + static_cast<uint64_t>(r.base()[dest] + row - r.start()[dest]) * g.h * es;
        }
        c.sync();
        bool copy = true;
        if constexpr (kMultiply) {
          if (!g.productGiven()) {
            storeTile(c, dt, g, w, acc, rowPtr, row0, eLo, eHi, col0, col1);
            copy = false;
          }
        }
        if (copy) copyRows(c, es, g, rowPtr, row0, eLo, eHi, col0, col1);
        if (proxyOf(v) != nullptr) {
          c.sync();
          const Status st = c.leader() ? postTileRows(v, WaitSite{seq.op, item, -1, WaitWhat::kProxyRoom}, r, rowPtr,
                                                      row0, eLo, eHi, col0 * es, (col1 - col0) * es, g.h * es)
                                       : Status::kOk;
          if (c.broadcast(st) != Status::kOk) return st == Status::kOk ? Status::kPeerFailed : st;
        }
        settle(c, v, seq, r, eLo, eHi, cols);
      }
    }
    return Status::kOk;
  }

  // A split tile's partial (the float32 sums of the part's slices) into the part's range's slot,
  // flagged with the op's epoch once the whole group's stores are issued. A thread's 128 sums go
  // as 32 16-byte stores, each instruction of a warp writing 512 contiguous bytes; through L2 only
  // (the owner reads them from another SM).
  template <class Coop>
  WEFT_HOST_DEVICE static Status leavePartial(const Coop& c, const GemmArgs& g, const OpSeq& seq, const TilePart& part,
                                              const tile::Accum& acc) {
#if defined(WEFT_HAVE_TMA_TILE)
    auto* slot = reinterpret_cast<float4*>(g.partials + part.range * kSplitPartialFloats);
#pragma unroll
    for (int i = 0; i < 32; ++i)
      __stcg(slot + i * tile::kThreads + threadIdx.x,
             make_float4(acc.d[4 * i], acc.d[4 * i + 1], acc.d[4 * i + 2], acc.d[4 * i + 3]));
    // Device scope: the owner is a block of this GPU (a system-scope release would also wait for
    // the NVLink stores of the block's earlier tiles).
    c.sync();
    if (c.leader())
      prim::atomicStore<prim::Order::kRelease, prim::Scope::kDevice>(partialFlag(g, part.range), seq.epoch);
#else
    (void)c, (void)g, (void)seq, (void)part, (void)acc;  // only the sm_90a tile is ever split
#endif
    return Status::kOk;
  }

  // The owner of a split tile: waits until the ranges before its own that end in its tile have
  // flagged their partials with the op's epoch. Only the sm_90a tile computes parts (the engine
  // splits only where the kernel's image has that tile: gemmKernelHasTmaTile); any other tile
  // computes a part's tile whole, so its owners need nobody's partial, and nobody leaves one.
  template <class Coop>
  WEFT_HOST_DEVICE static Status awaitPartials(const Coop& c, const CommView& v, const OpSeq& seq, uint32_t item,
                                               const GemmArgs& g, const TilePart& part) {
#if defined(WEFT_HAVE_TMA_TILE)
    for (uint64_t b = firstPartial(g.split, part); b < part.range; ++b) {
      if (g.split.empty(b)) continue;  // an empty range leaves no partial
      const Status st = wait<prim::Scope::kDevice>(c, v, partialFlag(g, b), seq.epoch,
                                                   WaitSite{seq.op, item, static_cast<int32_t>(b), WaitWhat::kPartial});
      if (st != Status::kOk) return st;
    }
#else
    (void)c, (void)v, (void)seq, (void)item, (void)g, (void)part;
#endif
    return Status::kOk;
  }
  // ... then adds them to its own sums, last range first (a fixed order: the same bits every run).
  WEFT_HOST_DEVICE static void addPartials(const GemmArgs& g, const TilePart& part, tile::Accum& acc) {
#if defined(WEFT_HAVE_TMA_TILE)
    const uint64_t first = firstPartial(g.split, part);
    for (uint64_t b = part.range; b-- > first;) {
      if (g.split.empty(b)) continue;
      const float4* slot = reinterpret_cast<const float4*>(g.partials + b * kSplitPartialFloats) + threadIdx.x;
      // 8 loads in flight at a time: all 32 at once would need 128 registers beside the sums.
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        if (i % 8 == 0) asm volatile("" ::: "memory");
        const float4 p = __ldcg(slot + i * tile::kThreads);
        acc.d[4 * i] += p.x;
        acc.d[4 * i + 1] += p.y;
        acc.d[4 * i + 2] += p.z;
        acc.d[4 * i + 3] += p.w;
      }
    }
#else
    (void)g, (void)part, (void)acc;
#endif
  }
  WEFT_HOST_DEVICE static uint64_t* partialFlag(const GemmArgs& g, uint64_t range) {
    return reinterpret_cast<uint64_t*>(g.partials + g.split.grid * kSplitPartialFloats) + range;
  }

  // After a part's rows [eLo, eHi) are stored. On a GPU they are counted only after the block's
  // next multiply: the count's release (a system-scope fence) would otherwise wait for the 64 KB
  // of stores to drain, most of them over NVLink, with the tensor cores idle; after the multiply
  // they have drained, and it costs nothing. The receivers learn of the rows one tile later,
  // which only their last item waits for. The CPU engine counts at once (it claims items
  // dynamically, so no group knows which item is its last).
  template <class Coop>
  WEFT_HOST_DEVICE static void settle(const Coop& c, const CommView& v, const OpSeq& seq, const RouteView& r,
                                      uint64_t eLo, uint64_t eHi, uint64_t cols) {
    c.sync();  // every thread's stores of the part are issued
#if defined(WEFT_DEVICE_PASS)
    if (c.leader()) {
      uncounted(r)[0] = static_cast<int64_t>(eLo);
      uncounted(r)[1] = static_cast<int64_t>(eHi);
    }
#else
    if (c.leader()) account(v, seq, r, eLo, eHi, cols);
#endif
  }
  // The leader (GPU): counts the rows settle() left uncounted, if any (the CPU engine's group
  // memory is not set up by startGroup, and it never leaves any).
  WEFT_HOST_DEVICE static void countUncounted(const CommView& v, const OpSeq& seq, const RouteView& r, uint64_t cols) {
    int64_t* p = uncounted(r);
    if (p[1] > p[0]) account(v, seq, r, static_cast<uint64_t>(p[0]), static_cast<uint64_t>(p[1]), cols);
    p[0] = p[1] = 0;
  }

#if defined(WEFT_HAVE_TMA_TILE)
  // The multiply after part `part` of data item `item` (expert e's rows of the tile at row0,
  // col0): the next expert with rows in the tile, else the first of the block's next data item
  // with a part (items go to blocks in strides of the grid), else none: dataTile's way, in
  // advance. Where dataTile goes another way (it gives up on an unsound route), tmaTile drops what
  // was loaded for this.
  template <class Coop>
  __device__ static tile::TileKey nextMultiply(const Coop& c, const CommView& v, const OpDesc& d, const GemmArgs& g,
                                               uint32_t item, uint64_t e, uint64_t row0, uint64_t col0,
                                               const TilePart& part) {
    if (const uint64_t f = nextExpert(g, e, row0); f < g.experts) return key(f, row0, col0, part);
    for (uint32_t after = item + gridDim.x; after + 1 < d.nitems; after += gridDim.x) {
      const TilePart next = partOf(g, after);
      if (!next.valid) continue;
      const TileAt t = tileAt(v, d, g.tokens, next.tile);
      return key(firstExpert(c, g, t.row0), t.row0, t.col0, next);
    }
    return tile::TileKey{};
  }
  __device__ static tile::TileKey key(uint64_t e, uint64_t row0, uint64_t col0, const TilePart& part) {
    return tile::TileKey{static_cast<int32_t>(e),        static_cast<int32_t>(row0),
                         static_cast<int32_t>(col0),     1,
                         static_cast<uint32_t>(part.k0), static_cast<uint32_t>(part.slices)};
  }
#endif

  // Computes the tile (row0, col0) of a @ w where tensor cores do: into `acc` (sm_90a; the ring
  // also starts loading the block's next multiply) or staged in shared memory (sm_80). Elsewhere
  // storeTile computes each element as it stores it.
  template <class Coop>
  WEFT_HOST_DEVICE static void computeTile(const Coop& c, const CommView& v, const OpDesc& d, DType dt,
                                           const GemmArgs& g, const tile::GemmMaps* maps, uint32_t item, uint64_t e,
                                           const uint8_t* w, uint64_t row0, uint64_t col0, const TilePart& part,
                                           tile::Accum& acc) {
#if defined(WEFT_HAVE_TMA_TILE)
    (void)w;
    uint8_t* smem = tile::pipelineAt(c.floats() + kCoopFloats);
    const tile::TileKey next = nextMultiply(c, v, d, g, item, e, row0, col0, part);
    if (dt == DType::kBFloat16)
      tile::tmaTile<DType::kBFloat16>(acc, smem, *maps, key(e, row0, col0, part), next);
    else
      tile::tmaTile<DType::kFloat16>(acc, smem, *maps, key(e, row0, col0, part), next);
#elif defined(WEFT_HAVE_MMA_TILE)
    (void)v, (void)d, (void)maps, (void)item, (void)e, (void)acc, (void)part;
    uint8_t* smem = tile::pipelineAt(c.floats() + kCoopFloats);
    if (dt == DType::kBFloat16)
      tile::mmaTile<DType::kBFloat16>(smem, g.a, w, g.tokens, g.k, g.h, row0, col0);
    else
      tile::mmaTile<DType::kFloat16>(smem, g.a, w, g.tokens, g.k, g.h, row0, col0);
#else
    (void)c, (void)v, (void)d, (void)dt, (void)g, (void)maps, (void)item, (void)e, (void)w, (void)row0, (void)col0,
        (void)part, (void)acc;
#endif
  }

  // Rows [eLo, eHi) and columns [col0, col1) of the tile, each row to rowPtr[row - row0].
  template <class Coop>
  WEFT_HOST_DEVICE static void storeTile(const Coop& c, DType dt, const GemmArgs& g, const uint8_t* w,
                                         const tile::Accum& acc, uint8_t* const* rowPtr, uint64_t row0, uint64_t eLo,
                                         uint64_t eHi, uint64_t col0, uint64_t col1) {
#if defined(WEFT_HAVE_TMA_TILE)
    (void)g, (void)w;
    uint8_t* smem = tile::pipelineAt(c.floats() + kCoopFloats);
    const auto first = static_cast<uint32_t>(eLo - row0), last = static_cast<uint32_t>(eHi - row0);
    const auto chunks = static_cast<uint32_t>((col1 - col0) / 8);  // h is a multiple of 8 elements
    if (dt == DType::kBFloat16)
      tile::tmaStoreRows<DType::kBFloat16>(acc, smem, rowPtr, first, last, col0 * 2, chunks);
    else
      tile::tmaStoreRows<DType::kFloat16>(acc, smem, rowPtr, first, last, col0 * 2, chunks);
#elif defined(WEFT_HAVE_MMA_TILE)
    (void)w, (void)dt, (void)acc;
    // A warp per row at a time, a lane per 16 bytes (a tile row is at most 32 of them: h is a
    // multiple of 8 elements): 512 contiguous bytes a store, and no division on the way.
    static_assert(kTileN * 2 == 32 * 16, "a tile row is a warp's 16-byte stores");
    const uint8_t* staged = tile::pipelineAt(c.floats() + kCoopFloats);
    const auto chunks = static_cast<uint32_t>((col1 - col0) / 8), lane = static_cast<uint32_t>(c.rank()) % 32;
    const auto first = static_cast<uint32_t>(eLo - row0), last = static_cast<uint32_t>(eHi - row0);
    if (lane >= chunks) return;
    const uint64_t colBytes = (col0 + lane * 8) * 2;
    const uint8_t* from = staged + lane * 16;
    for (uint32_t r = first + static_cast<uint32_t>(c.rank()) / 32; r < last; r += static_cast<uint32_t>(c.size()) / 32)
      store16(rowPtr[r] + colBytes, *reinterpret_cast<const Vec16*>(from + r * tile::kStagedPitch * 2));
#else
    (void)acc;
    const uint64_t width = col1 - col0;
    for (uint64_t i = c.rank(); i < (eHi - eLo) * width; i += c.size()) {
      const uint64_t row = eLo + i / width, col = col0 + i % width;
      float acc = 0.f;
      for (uint64_t kk = 0; kk < g.k; ++kk)
        acc += loadAsFloat(g.a, row * g.k + kk, dt) * loadAsFloat(w, kk * g.h + col, dt);
      storeFromFloat(rowPtr[row - row0], col, dt, acc);
    }
#endif
  }

  // The product given: rows [eLo, eHi) and columns [col0, col1) of `a`, each row to
  // rowPtr[row - row0], as storeTile stores a computed tile. 16-byte moves (h is a multiple of 8
  // two-byte elements), kCopyUnroll loads in flight per thread before its stores.
  template <class Coop>
  WEFT_HOST_DEVICE static void copyRows(const Coop& c, uint64_t es, const GemmArgs& g, uint8_t* const* rowPtr,
                                        uint64_t row0, uint64_t eLo, uint64_t eHi, uint64_t col0, uint64_t col1) {
    const auto chunks = static_cast<uint32_t>((col1 - col0) * es / kVecBytes);  // a tile row: at most 32
    const auto total = static_cast<uint32_t>(eHi - eLo) * chunks;
    const auto step = static_cast<uint32_t>(c.size());
    const uint8_t* from = g.a + (eLo * g.h + col0) * es;
    const uint64_t pitch = g.h * es, colByte = col0 * es;
    for (uint32_t i0 = static_cast<uint32_t>(c.rank()); i0 < total; i0 += step * kCopyUnroll) {
      Vec16 v[kCopyUnroll];
      WEFT_UNROLL
      for (int u = 0; u < kCopyUnroll; ++u) {
        const uint32_t i = i0 + static_cast<uint32_t>(u) * step;
        if (i < total) v[u] = load16(from + (i / chunks) * pitch + (i % chunks) * kVecBytes);
      }
      WEFT_UNROLL
      for (int u = 0; u < kCopyUnroll; ++u) {
        const uint32_t i = i0 + static_cast<uint32_t>(u) * step;
        if (i < total) store16(rowPtr[eLo - row0 + i / chunks] + colByte + (i % chunks) * kVecBytes, v[u]);
      }
    }
  }

  // Leader-only, once the group's stores of the tile's rows [eLo, eHi) are issued: has the proxy
  // carry each proxy destination's run of them (adjacent rows of its recv, `stride` apart).
  WEFT_HOST_DEVICE static Status postTileRows(const CommView& v, WaitSite site, const RouteView& r,
                                              uint8_t* const* rowPtr, uint64_t row0, uint64_t eLo, uint64_t eHi,
                                              uint64_t colByte, uint64_t rowBytes, uint64_t stride) {
    Status st = Status::kOk;
    for (int dest = r.destOf(static_cast<int64_t>(eLo)); dest < v.nranks && st == Status::kOk; ++dest) {
      const uint64_t lo = maxU64(eLo, static_cast<uint64_t>(r.start()[dest]));
      const uint64_t hi = minU64(eHi, static_cast<uint64_t>(r.start()[dest + 1]));
      if (lo >= eHi) break;
      if (lo >= hi || !viaProxy(v, dest)) continue;
      site.peer = dest;
      const auto offset = static_cast<uint64_t>(rowPtr[lo - row0] - v.at(dest, 0)) + colByte;
      st = postRows(v, site, dest, offset, hi - lo, rowBytes, stride);
    }
    return st;
  }

  // The leader, once the group's stores of rows [eLo, eHi) of one column tile are issued: counts
  // them per destination; the tile that completes a destination (its rows times the column tiles)
  // tells it so.
  WEFT_HOST_DEVICE static void account(const CommView& v, const OpSeq& seq, const RouteView& r, uint64_t eLo,
                                       uint64_t eHi, uint64_t cols) {
    prim::crossProcessRelease();
    for (int dest = r.destOf(static_cast<int64_t>(eLo)); dest < v.nranks; ++dest) {
      const uint64_t lo = maxU64(eLo, static_cast<uint64_t>(r.start()[dest]));
      const uint64_t hi = minU64(eHi, static_cast<uint64_t>(r.start()[dest + 1]));
      if (lo >= eHi) break;
      if (lo >= hi) continue;
      uint64_t* sent = v.signal(v.rank, v.layout.peerSignalOffset(PeerSignal::kGemmSent, dest));
      // One add, never a compare-and-swap loop: every block finishes its tiles at about the same
      // time, and a CAS loop over a shared word then serialises a whole wave of them.
      const uint64_t before = prim::atomicFetchAdd<prim::Order::kAcqRel, prim::Scope::kDevice>(sent, hi - lo);
      // A failed post (the proxy's ring stayed full) is recorded, and the communicator has failed.
      if (before + (hi - lo) == static_cast<uint64_t>(r.mine()[dest]) * cols)
        (void)signalLeaderTo(v, dest, v.layout.peerSignalOffset(PeerSignal::kGemmDone, v.rank), seq.epoch, false,
                             WaitSite{seq.op, 0, dest, WaitWhat::kProxyRoom});
    }
  }

  // The last item: the verdict; then every source's rows are in this rank's output.
  template <class Coop>
  WEFT_HOST_DEVICE static Status finish(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                        uint32_t item) {
    const GemmArgs g = args(d);
    const RouteView r{reinterpret_cast<int64_t*>(c.floats()), v.nranks};
    RouteVerdict verdict;
    Status st = readRoute(c, v, seq, item, r, &verdict);
    if (st != Status::kOk) return st;
    if (!verdict.ok()) {
      // Ranks that disagree are a misuse, recorded as every other op records it (both words).
      const bool mismatch = verdict.what == WaitWhat::kSignature;
      const Status why = mismatch ? Status::kMismatch : Status::kBadInput;
      if (c.leader())
        recordFailure(v, WaitSite{seq.op, item, verdict.rank, verdict.what}, why,
                      mismatch ? sigWord(runningOpMeet(), static_cast<uint32_t>(verdict.expected)) : verdict.expected,
                      mismatch ? sigWord(runningOpMeet(), static_cast<uint32_t>(verdict.observed)) : verdict.observed);
      return why;
    }
    for (int j = c.rank(); j < v.nranks; j += c.size()) {
      if (g.recvCounts) g.recvCounts[j] = r.from()[j];
      if ((r.mine()[j] == 0 || d.grain == 0) && st == Status::kOk)
        st = signalLeaderTo(v, j, v.layout.peerSignalOffset(PeerSignal::kGemmDone, v.rank), seq.epoch, false,
                            WaitSite{seq.op, item, j, WaitWhat::kProxyRoom});
    }
    if (uniform(c, v, st) != Status::kOk) return Status::kPeerFailed;
    st = waitEveryPeer(c, v, PeerSignal::kGemmDone, seq.epoch, seq.op, item, WaitWhat::kArrival, /*andSelf=*/true);
    // This rank's per-destination counts start every op at zero: once each is complete (its
    // tiles are all stored, and none is left to add), take it back down, by an atomic as every
    // write to it is (docs/design-notes.md, "A count that blocks add to is written only by atomics").
    for (int j = c.rank(); j < v.nranks && st == Status::kOk; j += c.size()) {
      uint64_t* sent = v.signal(v.rank, v.layout.peerSignalOffset(PeerSignal::kGemmSent, j));
      const uint64_t want = static_cast<uint64_t>(r.mine()[j]) * d.grain;
      if (want == 0) continue;
      st = pollAtLeast(v, sent, want, WaitSite{seq.op, item, j, WaitWhat::kArrival});
      if (st == Status::kOk)
        (void)prim::atomicFetchAdd<prim::Order::kRelaxed, prim::Scope::kDevice>(sent, uint64_t{0} - want);
    }
    return c.any(st != Status::kOk) ? Status::kPeerFailed : Status::kOk;
  }
};

}  // namespace weft::dev
