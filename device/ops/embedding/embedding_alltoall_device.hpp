// Fused embedding-bag + All-to-All, the model-parallel forward of DLRM. This rank owns num_tables
// tables (rows of `weights`, table t from row tableOffsets[t] to tableOffsets[t + 1]); the bags are
// CSR over (table, sample) of the global batch (nranks * localBatch samples): bag (t, s) is
// indices[offsets[t * globalBatch + s] .. offsets[t * globalBatch + s + 1]). The pooled vector of
// bag (t, s) goes straight into the output of rank d = s / localBatch, at
// [s % localBatch, tableBase + t, :] (zero copy).
//
// Work items: item 0 tells every peer that this rank's output is ready for this op's epoch (a
// sender must not overwrite an output its owner's stream may still be reading). Then, per
// destination (remote ones first, rotating so the ranks do not all hit the same one; this rank
// last), groups of bags: each waits for its destination's ready epoch, pools its bags
// (embedding_pool_device.hpp) and stores them. The data item that finishes last on this rank (a
// local counter) tells every rank, itself included, that all its vectors are stored: kEmbedDone =
// 2e, or 2e + 1 if it met a bad index. The last item waits for every rank's done word, so no rank
// needs to know how many tables, bags or items the others have.
//
// Indices are checked against their table (unless the check is off): a bad one is never read; its
// bag is pooled without it, the first is noted in EngineControl, and since every rank's op waits
// for this rank's done word, which carries the error, the op fails on every rank (kBadInput), after
// all data has moved, so no rank is left waiting.
//
// The unfused path (runtime: embedding_path unfused): EmbeddingPoolOp, a kernel of no ticket, pools
// every bag into a buffer of the engine's, laid out as an All-to-All's send buffer, then this op
// runs with `pooled` set and its data items copy the vectors from there instead of pooling them.
// The exchange, its signals and its packing are the same either way, so ranks may take different
// paths in one op: the choice is each rank's own.
#pragma once

#include "../../comm_device.hpp"
#include "../../signature_device.hpp"
#include "../partition_device.hpp"
#include "embedding_pool_device.hpp"

namespace weft::dev {

struct EmbeddingAllToAllOp {
  static constexpr uint64_t kFlagMean = 1, kFlagCheck = 2;

  // OpDesc fields: send = weights, count = dim, recv = the output's heap offset, grain = bags per
  // item, args.embedding the rest.
  WEFT_HOST_DEVICE static EmbeddingArgs args(const OpDesc& d) {
    const EmbeddingOpArgs& e = d.args.embedding;
    return EmbeddingArgs{reinterpret_cast<const uint8_t*>(d.send),
                         reinterpret_cast<const int64_t*>(e.tableOffsets),
                         reinterpret_cast<const int64_t*>(e.indices),
                         reinterpret_cast<const int64_t*>(e.offsets),
                         reinterpret_cast<const float*>(e.perSampleWeights),
                         e.numTables,
                         e.localBatch,
                         e.totalTables,
                         e.tableBase,
                         d.count,
                         (e.flags & kFlagMean) != 0,
                         (e.flags & kFlagCheck) != 0};
  }
  // The inverse of args(): the input fields of the descriptor (not kind, dtype, recv, tiling or
  // the pooled buffer).
  WEFT_HOST_DEVICE static void pack(const EmbeddingArgs& a, OpDesc& d) {
    d.send = reinterpret_cast<uint64_t>(a.weights);
    d.count = a.dim;
    EmbeddingOpArgs& e = d.args.embedding;
    e.tableOffsets = reinterpret_cast<uint64_t>(a.tableOffsets);
    e.indices = reinterpret_cast<uint64_t>(a.indices);
    e.offsets = reinterpret_cast<uint64_t>(a.offsets);
    e.perSampleWeights = reinterpret_cast<uint64_t>(a.perSampleWeights);
    e.numTables = a.numTables;
    e.localBatch = a.localBatch;
    e.totalTables = a.totalTables;
    e.tableBase = a.tableBase;
    e.flags = (a.mean ? kFlagMean : 0) | (a.check ? kFlagCheck : 0);
  }
  // Bags per item: about one item per worker group (`groups`: Engine::gatherWorkers), at least 8
  // bags. The lanes of a group pool an item's bags without a barrier; a barrier ends the item, and
  // with several items per group each one holds every warp to the slowest bag's latency (4 H200,
  // 8 tables x 4096 samples: 1024 items on 264 blocks took 129.5 us, one item per block 114.2).
  WEFT_HOST_DEVICE static uint32_t bagsPerItem(uint64_t numTables, uint64_t localBatch, uint32_t nranks,
                                               uint32_t groups) {
    const uint64_t per = ceilDiv(numTables * localBatch * nranks, groups < 1 ? 1 : groups);
    return static_cast<uint32_t>(per < 8 ? 8 : per);
  }
  WEFT_HOST_DEVICE static uint64_t itemsPerDest(uint64_t numTables, uint64_t localBatch, uint32_t bags) {
    return ceilDiv(numTables * localBatch, bags);
  }
  WEFT_HOST_DEVICE static uint32_t numItems(uint64_t numTables, uint64_t localBatch, uint32_t nranks, uint32_t bags) {
    return static_cast<uint32_t>(2 + nranks * itemsPerDest(numTables, localBatch, bags));
  }
  // Data items of this rank's op (the advance of its local item counters).
  WEFT_HOST_DEVICE static uint64_t dataItems(const OpDesc& d) { return d.nitems - 2; }

  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                     uint32_t item) {
    const HeapLayout& L = v.layout;
    const int me = v.rank;
    const EmbeddingArgs a = args(d);
    const uint64_t ipd = itemsPerDest(a.numTables, a.localBatch, d.grain);
    // Signatures (signature_device.hpp): the word goes just before each ready signal; a sender
    // compares the receiver's after acquiring it. A rank that sends nothing compares every peer's
    // word in its last item (empty ops exchange words, checked or not).
    const uint64_t mine = d.sig != 0 || dataItems(d) == 0 ? sigWord(runningOpMeet(), d.sig) : 0;
    if (item == 0) {
      c.sync();
      Status st = Status::kOk;
      if (c.leader()) {
        for (int j = 0; j < v.nranks && st == Status::kOk; ++j) {
          if (j == me) continue;
          const WaitSite site{seq.op, item, j, WaitWhat::kProxyRoom};
          if (mine != 0) st = publishSig(v, j, mine, site);
          if (st == Status::kOk)
            st = signalLeaderTo(v, j, L.peerSignalOffset(PeerSignal::kEmbedReadyFrom, me), seq.epoch, false, site);
        }
        if (st == Status::kOk) noteOwnSig(v, mine);
        if (st == Status::kOk && dataItems(d) == 0) st = announceDone(v, seq, item);  // nothing to send: done at once
      }
      return uniform(c, v, st);
    }
    if (item == 1 + v.nranks * ipd) {
      if (dataItems(d) == 0)
        if (const Status st = checkEveryPeerSig(c, v, mine, seq.op, item); st != Status::kOk) return st;
      return finish(c, v, seq, item);
    }

    const uint64_t i = item - 1;
    const int dest = static_cast<int>((me + 1 + i / ipd) % v.nranks);
    if (dest != me) {
      const Status st = waitChecked(c, v, v.signal(me, L.peerSignalOffset(PeerSignal::kEmbedReadyFrom, dest)),
                                    seq.epoch, WaitSite{seq.op, item, dest, WaitWhat::kReady}, mine);
      if (st != Status::kOk) return st;
    } else if (mine != 0) {  // this rank's own output: only once every peer agrees
      if (const Status st = checkEveryPeerSig(c, v, mine, seq.op, item); st != Status::kOk) return st;
    }
    const uint64_t perDest = a.numTables * a.localBatch;
    const uint64_t lo = (i % ipd) * d.grain;
    const uint64_t hi = minU64(perDest, lo + d.grain);
    const uint64_t rowBytes = a.dim * dtypeSize(static_cast<DType>(d.dtype));
    uint8_t* out = v.at(dest, d.recv);
    const Packing pk = viaProxy(v, dest) ? packing(a, lo, hi, rowBytes, packRunBytes(v)) : Packing{};
    if (d.args.embedding.pooled != 0) {
      const auto* from = reinterpret_cast<const uint8_t*>(d.args.embedding.pooled) + dest * perDest * rowBytes;
      copyBags(c, from, lo, hi, rowBytes, [&](uint64_t b) { return out + placeOf(a, pk, b, rowBytes); });
    } else {
      bool noted = false;
      poolBags(
          c, static_cast<DType>(d.dtype), a, a.localBatch * static_cast<uint64_t>(v.nranks), dest, lo, hi,
          [&](uint64_t b) { return out + placeOf(a, pk, b, rowBytes); },
          [&](uint64_t table, int64_t index, int64_t rows) {
            if (!noted) noteBadIndex(v, seq, table, index, rows);
            noted = true;
          });
    }
    if (viaProxy(v, dest)) {
      c.sync();
      const Status st = c.leader() ? postBags(v, WaitSite{seq.op, item, dest, WaitWhat::kProxyRoom}, a, dest, d.recv,
                                              lo, hi, rowBytes, pk)
                                   : Status::kOk;
      if (c.broadcast(st) != Status::kOk) return st == Status::kOk ? Status::kPeerFailed : st;
    }
    // The item that finishes last (by the local counter, which orders every item's stores before
    // it) announces that this rank's vectors are all stored. Device scope suffices for the
    // counter (causality is transitive; the announcement is a system-scope release), and spares
    // every item a system fence behind its remote stores.
    c.sync();
    Status st = Status::kOk;
    if (c.leader()) {
      prim::crossProcessRelease();
      const uint64_t before =
          prim::atomicFetchAdd<prim::Order::kAcqRel, prim::Scope::kDevice>(&v.control->embedItemsDone, uint64_t{1});
      if (before + 1 == seq.seqBase + dataItems(d)) st = announceDone(v, seq, item);
    }
    return uniform(c, v, st);
  }

 private:
  // Through the proxy, an item's whole samples [first, last) go `per` to a message, each message's
  // laid back to back in the mirror from its first sample's place in dest's recv: the proxy then
  // sends a message from the mirror in place, and the peer's proxy puts each sample's run at its
  // stride. Left at their places, a message's runs would be gathered by a CPU copy on this side,
  // which with several lanes made the fused op 1.3-1.5x the time of weft's All-to-All of the same
  // bytes. A packed message stays inside its own samples' place, so no item writes another's.
  // per 0: nothing packed (a mapped peer, or a sample's run longer than a message).
  struct Packing {
    uint64_t first = 0, last = 0, per = 0;
  };
  WEFT_HOST_DEVICE static Packing packing(const EmbeddingArgs& a, uint64_t lo, uint64_t hi, uint64_t rowBytes,
                                          uint64_t packBytes) {
    const uint64_t nt = a.numTables, run = nt * rowBytes;
    Packing p{ceilDiv(lo, nt), hi / nt, run != 0 && run <= packBytes ? minU64(packBytes / run, kRowsMax) : 0};
    // (A trigger's rows word holds the run and the stride up to 16 MiB.)
    if (p.last <= p.first || run > kRowBytesMax || a.totalTables * rowBytes > kStrideMax) p.per = 0;
    return p;
  }
  // Where bag b (table b % numTables of sample b / numTables) is stored, from dest's recv: its place
  // there, or its packed place in the mirror (Packing).
  WEFT_HOST_DEVICE static uint64_t placeOf(const EmbeddingArgs& a, const Packing& p, uint64_t b, uint64_t rowBytes) {
    const uint64_t nt = a.numTables, sample = b / nt, sampleBytes = a.totalTables * rowBytes;
    if (p.per != 0 && sample >= p.first && sample < p.last) {
      const uint64_t chunk = p.first + (sample - p.first) / p.per * p.per;
      return chunk * sampleBytes + (a.tableBase + (sample - chunk) * nt + b % nt) * rowBytes;
    }
    return sample * sampleBytes + (a.tableBase + b % nt) * rowBytes;
  }

  // Leader-only: has the proxy carry bags [lo, hi) of the item (a sample's tables are adjacent
  // rows of dest's recv): the first sample's tail, the whole samples (packed, a message at a time,
  // or as one run of rows), the last sample's head.
  WEFT_HOST_DEVICE static Status postBags(const CommView& v, const WaitSite& site, const EmbeddingArgs& a, int dest,
                                          uint64_t recv, uint64_t lo, uint64_t hi, uint64_t rowBytes,
                                          const Packing& pk) {
    const uint64_t nt = a.numTables, sampleBytes = a.totalTables * rowBytes;
    auto at = [&](uint64_t b) { return recv + (b / nt) * sampleBytes + (a.tableBase + b % nt) * rowBytes; };
    Status st = Status::kOk;
    while (lo < hi && st == Status::kOk) {
      const uint64_t sampleEnd = (lo / nt + 1) * nt;
      if (pk.per != 0 && lo % nt == 0 && lo / nt >= pk.first && lo / nt < pk.last) {  // a packed message
        const uint64_t samples = minU64(pk.per, pk.last - lo / nt);
        st = postPacked(v, site, dest, at(lo), samples, nt * rowBytes, sampleBytes);
        lo += samples * nt;
      } else if (lo % nt == 0 && sampleEnd <= hi) {  // whole samples from lo
        const uint64_t samples = (hi - lo) / nt;
        st = postRows(v, site, dest, at(lo), samples, nt * rowBytes, sampleBytes);
        lo += samples * nt;
      } else {
        const uint64_t end = minU64(sampleEnd, hi);
        st = postRows(v, site, dest, at(lo), 1, (end - lo) * rowBytes, 0);
        lo = end;
      }
    }
    return st;
  }

  // Bags [lo, hi) of one destination, pooled by EmbeddingPoolOp (bag b's vector at from + b *
  // rowBytes), to their places: 16-byte pieces where rows and both ends allow, else 8 (a row is
  // dim x at least 2 bytes, dim a multiple of 4), else bytes. The group's threads take consecutive
  // pieces, so the loads are coalesced and so are the stores within a row.
  template <class Coop, class Out>
  WEFT_HOST_DEVICE static void copyBags(const Coop& c, const uint8_t* from, uint64_t lo, uint64_t hi, uint64_t rowBytes,
                                        Out&& out) {
    if (lo >= hi || rowBytes == 0) return;
    const auto apart = reinterpret_cast<uintptr_t>(from) | reinterpret_cast<uintptr_t>(out(lo)) | rowBytes;
    const uint64_t piece = apart % kVecBytes == 0 ? kVecBytes : apart % 8 == 0 ? 8 : 1;
    const uint64_t perRow = rowBytes / piece, pieces = (hi - lo) * perRow;
    for (uint64_t i = static_cast<uint64_t>(c.rank()); i < pieces; i += static_cast<uint64_t>(c.size())) {
      const uint64_t b = lo + i / perRow, at = i % perRow * piece;
      const uint8_t* src = from + b * rowBytes + at;
      uint8_t* dst = out(b) + at;
      if (piece == kVecBytes)
        store16(dst, load16(src));
      else if (piece == 8)
        store8(dst, load8(src));
      else
        *dst = *src;
    }
  }

 public:
  // The first bad index of this rank, for its own failure record (the op's epoch marks it).
  WEFT_HOST_DEVICE static void noteBadIndex(const CommView& v, const OpSeq& seq, uint64_t table, int64_t index,
                                            int64_t rows) {
    EngineControl* k = v.control;
    uint32_t none = 0;
    if (!prim::atomicCas<prim::Order::kRelaxed, prim::Scope::kDevice>(&k->badTable, none,
                                                                      static_cast<uint32_t>(table) + 1))
      return;
    prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(&k->badIndex, index);
    prim::atomicStore<prim::Order::kRelaxed, prim::Scope::kDevice>(&k->badRows, rows);
    prim::atomicStore<prim::Order::kRelease, prim::Scope::kDevice>(&k->badEpoch, static_cast<uint32_t>(seq.epoch));
  }

 private:
  // Leader-only: this rank's vectors of this op are all stored; tells every rank, itself included,
  // and whether it met a bad index.
  WEFT_HOST_DEVICE static Status announceDone(const CommView& v, const OpSeq& seq, uint32_t item) {
    const bool bad = prim::atomicLoad<prim::Order::kAcquire, prim::Scope::kDevice>(&v.control->badEpoch) ==
                     static_cast<uint32_t>(seq.epoch);
    Status st = Status::kOk;
    for (int j = 0; j < v.nranks && st == Status::kOk; ++j)
      st = signalLeaderTo(v, j, v.layout.peerSignalOffset(PeerSignal::kEmbedDone, v.rank), 2 * seq.epoch + bad, false,
                          WaitSite{seq.op, item, j, WaitWhat::kProxyRoom});
    return st;
  }

  // The last item: every rank's vectors of this op are in this rank's output; then the op fails if
  // any rank met a bad index (this rank's own record names it; otherwise the rank that did).
  template <class Coop>
  WEFT_HOST_DEVICE static Status finish(const Coop& c, const CommView& v, const OpSeq& seq, uint32_t item) {
    Status st =
        waitEveryPeer(c, v, PeerSignal::kEmbedDone, 2 * seq.epoch, seq.op, item, WaitWhat::kArrival, /*andSelf=*/true);
    if (st != Status::kOk) return st;
    if (c.leader()) {
      EngineControl* k = v.control;
      if (prim::atomicLoad<prim::Order::kAcquire, prim::Scope::kDevice>(&k->badEpoch) ==
          static_cast<uint32_t>(seq.epoch)) {
        recordFailure(v, WaitSite{seq.op, k->badTable - 1, -1, WaitWhat::kIndex}, Status::kBadInput,
                      static_cast<uint64_t>(k->badRows), static_cast<uint64_t>(k->badIndex));
        st = Status::kBadInput;
      }
      for (int p = 0; p < v.nranks && st == Status::kOk; ++p)
        if (prim::atomicLoad<prim::Order::kAcquire>(
                v.signal(v.rank, v.layout.peerSignalOffset(PeerSignal::kEmbedDone, p))) == 2 * seq.epoch + 1) {
          recordFailure(v, WaitSite{seq.op, item, p, WaitWhat::kIndex}, Status::kBadInput, 0, 0);
          st = Status::kBadInput;
        }
    }
    return c.broadcast(st);
  }
};

// The unfused path's first half (OpKind::kEmbeddingPool): this rank's bags pooled into `pooled`,
// as an All-to-All's send buffer ([dest][sample][table][dim]), at the full speed of the device's
// memory; the embedding op that follows copies them out (EmbeddingAllToAllOp, `pooled`). The
// descriptor is the embedding op's (pack) with recv 0 and `grain` bags per item, cut across
// destinations. It meets no peer and takes no ticket (runtime/backend.hpp, poolEmbedding). A bad
// index is noted under the epoch of the embedding op that follows (opSeq gives this kernel that
// epoch), whose done word carries it to every rank, as the fused op's would.
struct EmbeddingPoolOp {
  WEFT_HOST_DEVICE static uint32_t numItems(uint64_t numTables, uint64_t localBatch, uint32_t nranks, uint32_t bags) {
    return static_cast<uint32_t>(ceilDiv(numTables * localBatch * nranks, bags < 1 ? 1 : bags));
  }

  template <class Coop>
  WEFT_HOST_DEVICE static Status run(const Coop& c, const CommView& v, const OpDesc& d, const OpSeq& seq,
                                     uint32_t item) {
    const EmbeddingArgs a = EmbeddingAllToAllOp::args(d);
    const uint64_t perDest = a.numTables * a.localBatch, all = perDest * static_cast<uint64_t>(v.nranks);
    const uint64_t rowBytes = a.dim * dtypeSize(static_cast<DType>(d.dtype));
    auto* pooled = reinterpret_cast<uint8_t*>(d.args.embedding.pooled);
    bool noted = false;
    // An item's bags may span two destinations (poolBags takes one at a time).
    for (uint64_t lo = uint64_t{item} * d.grain, hi = minU64(all, lo + d.grain); lo < hi;) {
      const uint64_t dest = lo / perDest, end = minU64(hi, (dest + 1) * perDest);
      poolBags(
          c, static_cast<DType>(d.dtype), a, a.localBatch * static_cast<uint64_t>(v.nranks), static_cast<int>(dest),
          lo - dest * perDest, end - dest * perDest,
          [&](uint64_t b) { return pooled + (dest * perDest + b) * rowBytes; },
          [&](uint64_t table, int64_t index, int64_t rows) {
            if (!noted) EmbeddingAllToAllOp::noteBadIndex(v, seq, table, index, rows);
            noted = true;
          });
      lo = end;
    }
    return Status::kOk;
  }
};

}  // namespace weft::dev
