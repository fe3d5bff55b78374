// Pooling of embedding bags (TorchRec/FBGEMM CSR layout), the gather half of the fused
// embedding-bag + All-to-All, kept apart so that an unfused pooling kernel (weft-bench's baseline)
// runs exactly the same code.
//
// Pooling is a gather of random rows: its speed is the number of row loads in flight. So each bag
// gets the fewest lanes that cover its row in 16-byte chunks (dim 128 bf16: 16 lanes, two bags per
// warp), and every lane loads kPoolUnroll rows before it adds any of them. Rows that are not a
// multiple of 16 bytes (or tables not 16-byte aligned) take a chunk of one element.
#pragma once

#include "../../dtype_device.hpp"
#include "../../primitives_device.hpp"
#include "../../vector_device.hpp"
#include "embedding_args.hpp"

namespace weft::dev {

constexpr int kPoolUnroll = 8;  // rows each lane loads before adding them

// A piece of a row: 16 bytes, or (kVec false) one element, held as float bits.
template <DType T, bool kVec>
struct RowChunk {
  static constexpr uint32_t kBytes = kVec ? kVecBytes : dtypeSize(T);
  static constexpr int kElems = static_cast<int>(kBytes / dtypeSize(T));
  Vec16 v;

  WEFT_HOST_DEVICE void load(const uint8_t* p) {
    if constexpr (kVec)
      v = load16(p);
    else
      v.w[0] = floatBits(loadAsFloat(p, 0, T));
  }
  WEFT_HOST_DEVICE float at(int i) const {
    if constexpr (!kVec || T == DType::kFloat32) return bitsFloat(v.w[i]);
    const uint16_t h = static_cast<uint16_t>(v.w[i / 2] >> (16 * (i % 2)));
    return T == DType::kFloat16 ? halfToFloat(h) : bf16ToFloat(h);
  }
  WEFT_HOST_DEVICE static void store(uint8_t* p, const float* acc) {
    if constexpr (kVec)
      store16(p, pack<T>(acc));
    else
      storeFromFloat(p, 0, T, acc[0]);
  }
};

// The indices (and weights) of kPoolUnroll consecutive entries of a bag from j on; entries at or
// past `end` read as index 0, weight 1 (never used).
struct IndexBatch {
  int64_t index[kPoolUnroll];
  float weight[kPoolUnroll];
  WEFT_HOST_DEVICE void load(const EmbeddingArgs& a, int64_t j, int64_t end) {
    WEFT_UNROLL
    for (int u = 0; u < kPoolUnroll; ++u) {
      index[u] = j + u < end ? a.indices[j + u] : 0;
      weight[u] = j + u < end && a.perSampleWeights ? a.perSampleWeights[j + u] : 1.f;
    }
  }
};

// Pools bags [lo, hi) of those whose samples belong to rank `dest`: bag b is sample
// dest * localBatch + b / numTables of table b % numTables (consecutive bags fill consecutive
// tables of a sample). Its vector goes to out(b) (a byte pointer; out(b + 1) - out(b) must be a
// whole number of rows' bytes, as in both users' layouts). Sum or mean in float32, rows weighted
// by perSampleWeights if given, an empty bag gives zeros. With a.check, an index outside its
// table is never read; onBad(table, index, rows) is called for it, and its bag pooled without it.
template <class Coop, DType T, bool kVec, class Out, class OnBad>
WEFT_HOST_DEVICE void poolBagsAs(const Coop& c, const EmbeddingArgs& a, uint64_t globalBatch, int dest, uint64_t lo,
                                 uint64_t hi, Out&& out, OnBad&& onBad) {
  using Chunk = RowChunk<T, kVec>;
  constexpr uint64_t es = dtypeSize(T);
  const uint64_t chunks = a.dim * es / Chunk::kBytes;
  uint32_t group = 1;  // lanes per bag: a power of two, at most a warp
  while (group < chunks && group < static_cast<uint32_t>(prim::kWarpSize)) group *= 2;
  const uint32_t perWarp = static_cast<uint32_t>(prim::kWarpSize) / group;
  const uint32_t sub = static_cast<uint32_t>(c.lane()) % group;
  const uint64_t first = static_cast<uint64_t>(c.warp()) * perWarp + static_cast<uint32_t>(c.lane()) / group;
  const uint64_t stride = static_cast<uint64_t>(c.warps()) * perWarp;
  for (uint64_t b = lo + first; b < hi; b += stride) {
    const uint64_t t = b % a.numTables;
    const uint64_t bag = t * globalBatch + static_cast<uint64_t>(dest) * a.localBatch + b / a.numTables;
    const int64_t begin = a.offsets[bag], end = a.offsets[bag + 1];
    const int64_t rowBase = a.tableOffsets[t], rows = a.tableOffsets[t + 1] - rowBase;
    const float scale = a.mean && end > begin ? 1.f / static_cast<float>(end - begin) : 1.f;
    const uint8_t* table = a.weights + static_cast<uint64_t>(rowBase) * a.dim * es;
    uint8_t* dst = out(b);
    for (uint64_t ch = sub; ch < chunks; ch += group) {
      const uint8_t* column = table + ch * Chunk::kBytes;
      float acc[Chunk::kElems] = {};
      // Software-pipelined: the next batch's indices load while this batch's rows do, so a batch
      // costs one memory latency, not two (index, then row).
      IndexBatch next;
      next.load(a, begin, end);
      for (int64_t j0 = begin; j0 < end; j0 += kPoolUnroll) {
        const IndexBatch cur = next;
        // Rows not taken (past the bag's end, or a bad index) load nothing and weigh 0.
        Chunk x[kPoolUnroll];
        float w[kPoolUnroll];
        WEFT_UNROLL
        for (int u = 0; u < kPoolUnroll; ++u) {
          const int64_t idx = cur.index[u];
          const bool bad = j0 + u < end && a.check && (idx < 0 || idx >= rows);
          if (bad) onBad(t, idx, rows);
          const bool take = j0 + u < end && !bad;
          w[u] = take ? cur.weight[u] : 0.f;
          if (take)
            x[u].load(column + static_cast<uint64_t>(idx) * a.dim * es);
          else
            x[u].v = Vec16{};
        }
        next.load(a, j0 + kPoolUnroll, end);
        WEFT_UNROLL
        for (int u = 0; u < kPoolUnroll; ++u)
          for (int e = 0; e < Chunk::kElems; ++e) acc[e] += w[u] * x[u].at(e);
      }
      for (int e = 0; e < Chunk::kElems; ++e) acc[e] *= scale;
      Chunk::store(dst + ch * Chunk::kBytes, acc);
    }
  }
}

// poolBagsAs for the runtime dtype, with 16-byte chunks wherever rows, tables and output allow.
template <class Coop, class Out, class OnBad>
WEFT_HOST_DEVICE void poolBags(const Coop& c, DType dt, const EmbeddingArgs& a, uint64_t globalBatch, int dest,
                               uint64_t lo, uint64_t hi, Out&& out, OnBad&& onBad) {
  if (lo >= hi) return;
  const bool vec = a.dim * dtypeSize(dt) % kVecBytes == 0 && aligned16(a.weights) && aligned16(out(lo));
  withDType(dt, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    if (vec)
      poolBagsAs<Coop, T, true>(c, a, globalBatch, dest, lo, hi, out, onBad);
    else
      poolBagsAs<Coop, T, false>(c, a, globalBatch, dest, lo, hi, out, onBad);
  });
}

}  // namespace weft::dev
