// The communicator's ops: each fills an op descriptor (the op headers' packing and item counts),
// checks what the ranks must agree on, and submits it to the engine; the blas paths hand their
// GEMV or GEMM to the engine's vendor BLAS. comm.cpp holds the communicator's life (init, memory,
// status page, peer watch, abort and destroy).
#include <algorithm>
#include <cstring>
#include <optional>

#include "comm.hpp"
#include "common/log.hpp"
#include "device/ops/collectives/allreduce_device.hpp"
#include "device/ops/collectives/allreduce_oneshot_device.hpp"
#include "device/ops/collectives/alltoall_device.hpp"
#include "device/ops/embedding/embedding_alltoall_device.hpp"
#include "device/ops/gemm/gemm_alltoall_device.hpp"
#include "device/ops/gemv/gemv_allreduce_device.hpp"
#include "device/signature_device.hpp"
#include "service/staging.hpp"
#include "service/weftd_inputs.hpp"
#include "signature.hpp"

namespace weft {

using dev::Status;

std::optional<Code> codeOfKind(Status st) {
  switch (st) {
    case Status::kOk:
      return Code::kSuccess;
    case Status::kTimeout:
      return Code::kTimeout;
    case Status::kAborted:
      return Code::kAborted;
    case Status::kBadInput:
      return Code::kInvalidArgument;
    case Status::kTransport:
      return Code::kTransport;
    case Status::kMismatch:
      return Code::kInvalidUsage;
    default:
      return std::nullopt;
  }
}

namespace {

// A status that names no kind takes the communicator's first failure's, else a timeout.
Code codeOf(Status st, const dev::QueueHeader* q) {
  if (const auto c = codeOfKind(st)) return *c;
  const Status first = failureStatus(*q);
  const auto c = codeOfKind(first);
  return c && *c != Code::kSuccess ? *c : Code::kTimeout;
}

// Tiles are the unit of parallelism (a worker takes one at a time): a stream of `bytes` is cut into
// about `targetTiles` of them, each at least kMinTileBytes and at most the inbox slot (tile_bytes),
// a multiple of 256 bytes. A function of the op alone, so every rank cuts alike. The targets were
// measured on 4 x H200 (docs/archive/perf-journal-2026-11.md): 64 per AllReduce shard, 32 per All-to-All send buffer.
constexpr uint64_t kAllReduceTiles = 64, kAllToAllTiles = 32;
// Through the host proxy a tile costs a message, a flush and a signal, each through both ranks'
// proxy threads: a few large tiles beat many parallel small ones. 4 per shard or send buffer
// (tile_bytes caps them) measured fastest of 64/16/8/4 on a GPU and on the CPU backend
// (docs/perf.md, "Tiles through the proxy"). proxyPeers_ is every rank's alike.
constexpr uint64_t kProxyTiles = 4;

uint32_t tileElemsFor(uint64_t bytes, uint64_t targetTiles, uint64_t maxTileBytes, uint32_t elemBytes) {
  constexpr uint64_t kMinTileBytes = 16 << 10;
  uint64_t tile = (bytes / targetTiles + 255) / 256 * 256;
  tile = std::max(tile, std::min(kMinTileBytes, maxTileBytes));
  tile = std::min(tile, maxTileBytes);
  return static_cast<uint32_t>(tile / elemBytes);
}

bool spansOverlap(const void* a, uint64_t aBytes, const void* b, uint64_t bBytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return aBytes > 0 && bBytes > 0 && x < y + bBytes && y < x + aBytes;
}

}  // namespace

bool Comm::exchangeFits(uint64_t payloadBytes, uint64_t limit) const {
  return payloadBytes > 0 && payloadBytes <= limit && nranks_ > 1 && nranks_ <= dev::kMaxSumSources;
}

uint32_t Comm::exchangeItems(uint32_t items) const { return proxyPeers_ ? std::min(items, engineWorkers_) : items; }

Code Comm::submit(const dev::OpDesc& desc, uint64_t bytes, void* stream, bool capturing) {
  // weftd's GPU engine follows the pointers of the ops it takes from the queue; a captured op and
  // the GEMM and GEMV (which run alone) are kernels of this process, with its own.
  if (weftdInputs_ && !capturing && !engine_->runsAlone(desc)) {
    dev::OpDesc d = desc;
    weftdInputs_->prepare(d, nranks_);
    return submitHere(d, bytes, stream, capturing);
  }
  if (!staging_) return submitHere(desc, bytes, stream, capturing);
  // weftd's engine reads the op's inputs through the staging segment: one op at a time in it.
  std::lock_guard<std::mutex> lock(stagingMutex_);
  dev::OpDesc d = desc;
  staging_->prepare(d, nranks_);
  const Code c = submitHere(d, bytes, stream, capturing);
  staging_->finish();
  return c;
}

Code Comm::submitHere(const dev::OpDesc& desc, uint64_t bytes, void* stream, bool capturing,
                      const std::function<void(dev::OpDesc&)>& first) {
  requireHealthy();
  uint64_t ticket;
  Status st;
  dev::OpDesc d = desc;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    if (first) first(d);
    if (capturing) {
      // Runs at each replay, in graph order; it takes no ticket (the queue never sees it).
      engine_->capture(d, stream);
      return Code::kSuccess;
    }
    ticket = queue_->reserve();
    status::OpRow row{};
    if (page_) row = page_->submitted(ticket, d, bytes, !hostSeesEnd(), engine_->itemsOf(d));
    st = engine_->enqueue(ticket, d, stream, timeoutNs_);
    if (watch_ && st == Status::kOk) watch_->submitted(row);
  }
  if (st == Status::kOk) st = engine_->finish(ticket, stallNs());
  if (page_ && (hostSeesEnd() || st != Status::kOk)) page_->ended(ticket, st, queue_->header());
  if (st == Status::kOk) return Code::kSuccess;
  const Code c = codeOf(st, queue_->header());
  std::string why = failureText();
  const char* what = c == Code::kAborted           ? "op aborted"
                     : c == Code::kInvalidArgument ? "op failed"
                     : c == Code::kInvalidUsage    ? "op failed"
                     : c == Code::kTransport       ? "op failed in the transport"
                                                   : "op timed out";
  throw Error(c, std::string(what) + (why.empty() ? "" : ": " + why));
}

Code Comm::allReduce(const void* send, void* recv, uint64_t count, dev::DType dt, void* stream) {
  const bool capturing = Engine::checkStream(stream);
  const uint32_t es = dev::dtypeSize(dt);
  const uint64_t bytes = count * es;
  dev::OpDesc d{};
  d.kind = static_cast<uint32_t>(dev::OpKind::kAllReduce);
  d.dtype = static_cast<uint32_t>(dt);
  d.count = count;
  // An empty op still runs (every rank's signal counters must advance alike) but touches no memory.
  d.recv = bytes ? heapOffset(recv, bytes, "recvbuf") : 0;
  if (send != recv) {
    checkInputInHeap(send, bytes, "sendbuf");
    if (spansOverlap(send, bytes, recv, bytes))
      throw Error(Code::kInvalidArgument, "sendbuf: overlaps recvbuf without being the same buffer (in place)");
  }
  d.send = reinterpret_cast<uint64_t>(send);
  // Peers write into recvbuf where the op goes reduce-scatter + all-gather: its offset is part of
  // the signature whichever way this call goes, so that ranks that pass different blocks fail alike.
  d.sig = signature(dev::SigOp::kAllReduce, dt, sigHash({count}), sigHash({d.recv}));
  // Small inputs: one-shot (one exchange, latency-bound); the rest: reduce-scatter + all-gather.
  if (exchangeFits(bytes, oneShotMax_)) {
    d.kind = static_cast<uint32_t>(dev::OpKind::kAllReduceOneShot);
    const bool lines = bytes * static_cast<uint64_t>(nranks_ - 1) >= oneShotLinesFrom_;
    d.args.oneShot.lines = lines ? 1 : 0;
    d.nitems = exchangeItems(dev::AllReduceOneShotOp::numItems(bytes, lines));
    return submit(d, bytes, stream, capturing);
  }
  // Reduce-scatter works on one shard per rank: its tiles are what the workers share.
  d.grain = tileElemsFor(dev::shardElems(count, nranks_, dev::vectorElems(es)) * es,
                         proxyPeers_ ? kProxyTiles : kAllReduceTiles, tileBytes_, es);
  d.nitems = dev::AllReduceOp::numItems(count, nranks_, es, d.grain);
  return submit(d, bytes, stream, capturing);
}

Code Comm::allToAll(const void* send, void* recv, uint64_t countPerRank, dev::DType dt, void* stream) {
  const bool capturing = Engine::checkStream(stream);
  const uint32_t es = dev::dtypeSize(dt);
  const uint64_t bytes = countPerRank * es * nranks_;
  dev::OpDesc d{};
  d.kind = static_cast<uint32_t>(dev::OpKind::kAllToAll);
  d.dtype = static_cast<uint32_t>(dt);
  d.count = countPerRank;
  d.recv = bytes ? heapOffset(recv, bytes, "recvbuf") : 0;
  checkInputInHeap(send, bytes, "sendbuf");
  if (spansOverlap(send, bytes, recv, bytes))
    throw Error(Code::kInvalidArgument, "sendbuf: overlaps recvbuf; All-to-All cannot run in place");
  d.send = reinterpret_cast<uint64_t>(send);
  d.sig = signature(dev::SigOp::kAllToAll, dt, sigHash({countPerRank}), sigHash({d.recv}));
  // Through the proxy a small op's cost is its trips through the proxies: blocks within the
  // one-shot's bound go staged, one trip, where the direct op takes two (a ready signal, then the
  // data). Never past the auto bound: a oneshot_max_bytes raised for the AllReduce's sake must not
  // move large blocks into the exchange, slower than the direct op past a few KB through the
  // proxy. Every rank decides alike: the bound and the paths are agreed at init.
  if (proxyPeers_ && exchangeFits(countPerRank * es, std::min(oneShotMax_, autoProxyStagedBytes(nranks_)))) {
    d.args.allToAll.staged = 1;
    d.nitems = exchangeItems(dev::AllToAllOp::stagedItems(countPerRank * es));
    return submit(d, bytes, stream, capturing);
  }
  d.grain = tileElemsFor(bytes, proxyPeers_ ? kProxyTiles : kAllToAllTiles, tileBytes_, es);
  d.nitems = dev::AllToAllOp::numItems(countPerRank, nranks_, d.grain);
  return submit(d, bytes, stream, capturing);
}

Code Comm::gemvAllReduce(const void* x, const void* w, void* y, uint32_t batch, uint64_t n, uint64_t k, dev::DType dt,
                         void* stream) {
  const bool capturing = Engine::checkStream(stream);
  const uint32_t es = dev::dtypeSize(dt);
  const uint64_t yBytes = uint64_t{batch} * n * es;
  dev::OpDesc d{};
  d.kind = static_cast<uint32_t>(dev::OpKind::kGemvAllReduce);
  d.dtype = static_cast<uint32_t>(dt);
  d.count = n;
  d.recv = yBytes ? heapOffset(y, yBytes, "y") : 0;
  checkInputInHeap(x, uint64_t{batch} * k * es, "x");
  checkInputInHeap(w, n * k * es, "w");
  // y is written while other work items still read x and w.
  if (spansOverlap(x, uint64_t{batch} * k * es, y, yBytes)) throw Error(Code::kInvalidArgument, "x: overlaps y");
  if (spansOverlap(w, n * k * es, y, yBytes)) throw Error(Code::kInvalidArgument, "w: overlaps y");
  d.send = reinterpret_cast<uint64_t>(x);
  d.args.gemv.w = reinterpret_cast<uint64_t>(w);
  d.args.gemv.batch = batch;
  d.args.gemv.k = k;
  d.sig = signature(dev::SigOp::kGemvAllReduce, dt, sigHash({batch, n, k}), sigHash({d.recv}));
  if (yBytes == 0 && nranks_ > 1) {
    // Nothing to compute or reduce, but the ranks must still meet: an empty one-shot op exchanges
    // the signature words alone (and a rank whose y is not empty finds the difference).
    d.kind = static_cast<uint32_t>(dev::OpKind::kAllReduceOneShot);
    d.count = 0;
    d.args.oneShot = dev::OneShotOpArgs{};  // the 8-byte lines, the fused GEMV's exchange
    d.nitems = 1;
    return submit(d, 0, stream, capturing);
  }
  d.grain = dev::GemvAllReduceOp::computeItems(n, static_cast<uint32_t>(engine_->groupsFor(dev::OpKind::kGemv)));
  d.nitems = dev::GemvAllReduceOp::numItems(d.grain);
  // Fused where the path table (or gemv_path) says so and every rank's float32 partials fit the
  // exchange's scratch (gemv_scratch_bytes); reduced by the slices' owners where asked and every rank owns a
  // slice (else by every rank). Otherwise (and on one rank, or for an empty y) a GEMV writes y, the
  // vendor BLAS's where the path is blas and the engine has one, else weft's, and an AllReduce of y
  // follows. (Ranks may differ in which GEMV they run: it is local.)
  // The path table was measured between p2p peers. Through the host proxy the fused exchange's
  // partials travel as flagged words in messages, and on 4 H200 as 2 x 2 nodes over UCX tcp the
  // fused GEMV + AllReduce took 15x the time of the blas path (a GEMV, then weft's AllReduce):
  // a job with proxy peers takes the blas path unless gemv_path says otherwise.
  const OpPath path = gemvForced_   ? *gemvForced_
                      : proxyPeers_ ? OpPath::kBlas
                                    : pathTable_.choose(FusedOp::kGemvAllReduce, pathPlacement_, {{batch, n, k}}).path;
  const uint64_t partialBytes = dev::GemvAllReduceOp::numSlices(n) * dev::gemvSliceFloats(batch) * sizeof(float);
  const bool fused = path == OpPath::kFused || path == OpPath::kFusedRsag;
  if (fused && yBytes > 0 && exchangeFits(partialBytes, gemvScratch_)) {
    d.args.gemv.owners = path == OpPath::kFusedRsag && dev::GemvAllReduceOp::fusedOwnersFit(n, nranks_) ? 1 : 0;
    return submit(d, yBytes, stream, capturing);
  }
  Code c = Code::kSuccess;
  if (path != OpPath::kBlas || yBytes == 0 || !vendorGemv({x, w, y, batch, n, k, dt}, stream, capturing)) {
    d.kind = static_cast<uint32_t>(dev::OpKind::kGemv);
    d.nitems = d.grain;
    c = submit(d, yBytes, stream, capturing);
  }
  if (nranks_ == 1 || yBytes == 0 || c != Code::kSuccess) return c;
  return allReduce(y, y, uint64_t{batch} * n, dt, stream);
}

bool Comm::vendorGemv(const GemvOperands& g, void* stream, bool capturing) {
  requireHealthy();
  std::lock_guard<std::mutex> lock(submitMutex_);
  return engine_->vendorGemv(g, stream, capturing);
}

Code Comm::embeddingAllToAll(const dev::EmbeddingArgs& a, void* recv, dev::DType dt, void* stream) {
  using Op = dev::EmbeddingAllToAllOp;
  const bool capturing = Engine::checkStream(stream);
  const uint64_t recvBytes = a.localBatch * a.totalTables * a.dim * dev::dtypeSize(dt);
  dev::OpDesc d{};
  d.kind = static_cast<uint32_t>(dev::OpKind::kEmbeddingAllToAll);
  d.dtype = static_cast<uint32_t>(dt);
  d.recv = recvBytes ? heapOffset(recv, recvBytes, "recv") : 0;
  dev::EmbeddingArgs checked = a;
  checked.check = checkIndices_;  // the communicator's setting decides
  Op::pack(checked, d);
  d.sig =
      signature(dev::SigOp::kEmbeddingAllToAll, dt, sigHash({a.localBatch, a.totalTables, a.dim}), sigHash({d.recv}));
  d.grain = Op::bagsPerItem(a.numTables, a.localBatch, static_cast<uint32_t>(nranks_),
                            static_cast<uint32_t>(engine_->groupsFor(dev::OpKind::kEmbeddingAllToAll)));
  // Through the host proxy an item's whole samples travel packed, as many to a message as one
  // holds (a sample's vectors are one run in the receiver's output); a sample cut at either end
  // adds a message of its own. So an item is whole messages of whole samples: each message costs
  // the proxy's lanes a send whatever its size, and one item per block cut a 2-rank job's rows
  // into messages of a few KiB, where the All-to-All sends whole ones.
  if (proxyPeers_ && a.numTables > 0) {  // proxy peers: this rank's heap has a proxy
    const uint64_t run = a.numTables * std::max<uint64_t>(1, a.dim * dev::dtypeSize(dt));
    const uint64_t perMessage = heap_->proxy()->messageBytes() / run;  // 0: a sample is longer
    const uint64_t unit = std::max<uint64_t>(1, perMessage) * a.numTables;
    const uint64_t whole = dev::ceilDiv(std::max<uint64_t>(d.grain, unit), unit) * unit;
    if (whole <= UINT32_MAX) d.grain = static_cast<uint32_t>(whole);
  }
  d.nitems = Op::numItems(a.numTables, a.localBatch, static_cast<uint32_t>(nranks_), d.grain);
  // The path table (or embedding_path) chooses between pooling each bag straight into its
  // destination (fused) and pooling every bag into the engine's buffer first, at the speed of the
  // device's own memory, then sending the vectors (unfused). The pooling is no op of the queue's
  // and the exchange is this same op, so ranks may differ. Engines that cannot run it (the
  // persistent engine, weftd's) run fused, as do the ops whose inputs weftd reads.
  // The table was measured between p2p peers (as the GEMV's above). Through the host proxy the
  // fused op was 1.35-1.7x faster than unfused (2 ranks sharing an H100, docs/perf.md): the
  // exchange, not the pooling, bounds it there, and fused overlaps the two.
  const uint64_t bags = a.numTables * a.localBatch * static_cast<uint64_t>(nranks_);
  const OpPath path =
      embeddingForced_ ? *embeddingForced_
      : proxyPeers_
          ? OpPath::kFused
          : pathTable_.choose(FusedOp::kEmbeddingAllToAll, pathPlacement_, {{a.localBatch, a.numTables, a.dim}}).path;
  if (path != OpPath::kUnfused || bags == 0 || a.dim == 0 || weftdInputs_ || staging_)
    return submit(d, recvBytes, stream, capturing);
  dev::OpDesc pool = d;
  pool.kind = static_cast<uint32_t>(dev::OpKind::kEmbeddingPool);
  pool.recv = 0;
  pool.sig = 0;
  pool.grain = Op::bagsPerItem(a.numTables, a.localBatch, static_cast<uint32_t>(nranks_),
                               static_cast<uint32_t>(engine_->groupsFor(dev::OpKind::kEmbeddingPool)));
  pool.nitems = dev::EmbeddingPoolOp::numItems(a.numTables, a.localBatch, static_cast<uint32_t>(nranks_), pool.grain);
  // Pooled under the submit lock, right before the exchange is queued: no other op of this
  // communicator comes between them, so the pooling's note of a bad index names this exchange's
  // epoch, and no other thread's pooling overwrites the buffer before the exchange has read it
  // (the next pooling runs after it: in stream order on a GPU, after the queue drains on the CPU).
  const uint64_t pooledBytes = bags * a.dim * dev::dtypeSize(dt);
  return submitHere(d, recvBytes, stream, capturing, [&](dev::OpDesc& exchange) {
    exchange.args.embedding.pooled =
        reinterpret_cast<uint64_t>(engine_->poolEmbedding(pool, pooledBytes, stream, capturing));
  });
}

Code Comm::gemmAllToAll(const dev::GemmArgs& g, void* recv, dev::DType dt, void* stream) {
  const bool capturing = Engine::checkStream(stream);
  if (nranks_ > dev::kRouteMaxRanks)
    throw Error(Code::kNotSupported,
                "comm: the GEMM + All-to-All supports at most " + std::to_string(dev::kRouteMaxRanks) + " ranks");
  if ((static_cast<uint64_t>(nranks_) + dev::kRouteExtra) * dev::kLlPayloadBytes > layout_.oneShotBytes)
    throw Error(Code::kNotSupported, "oneshot_max_bytes: too small to carry the send counts of every rank");
  const uint64_t es = dev::dtypeSize(dt);
  const uint64_t recvBytes = g.capacity * g.h * es;
  const uint64_t countBytes = static_cast<uint64_t>(nranks_) * sizeof(int64_t);
  dev::OpDesc d{};
  d.kind = static_cast<uint32_t>(dev::OpKind::kGemmAllToAll);
  d.dtype = static_cast<uint32_t>(dt);
  // Peers address this rank's recv by the offset they pass, so it is needed even where this rank
  // receives nothing (the route checks that every rank passes the same).
  d.recv = g.h ? heapOffset(recv, recvBytes, "recv") : 0;
  // Peers store into recv while this rank's kernel still reads its inputs.
  const struct {
    const void* p;
    uint64_t bytes;
    const char* name;
  } inputs[] = {{g.a, g.tokens * g.k * es, "a"},
                {g.w, g.experts * g.k * g.h * es, "w"},
                {g.sendCounts, countBytes, "send_counts"},
                {g.recvCounts, g.recvCounts ? countBytes : 0, "recv_counts"},
                {g.expertEnds, g.expertEnds ? g.experts * sizeof(int64_t) : 0, "expert_offsets"}};
  for (const auto& in : inputs) {
    checkInputInHeap(in.p, in.bytes, in.name);
    if (spansOverlap(in.p, in.bytes, recv, recvBytes))
      throw Error(Code::kInvalidArgument, std::string(in.name) + ": overlaps recv");
  }
  // The path table (or gemm_path) chooses between weft's GEMM, which sends each tile as it is
  // computed, and the vendor BLAS's GEMM followed by the same op routing the product's rows (for
  // few tokens and a deep k, where the vendor's kernels are faster than weft's split last wave).
  // Ranks may differ: both run one op, whose route and stores do not depend on who multiplied.
  // A grouped call is always fused: its experts' row ranges are in device memory, out of the
  // vendor BLAS's reach without a host synchronisation.
  dev::GemmArgs routed = g;
  std::unique_lock<std::mutex> productLock(productMutex_, std::defer_lock);
  if (g.experts == 1 && !g.expertEnds && g.tokens > 0 && g.k > 0 && g.h > 0) {
    const OpPath path = gemmForced_
                            ? *gemmForced_
                            : pathTable_.choose(FusedOp::kGemmAllToAll, pathPlacement_, {{g.tokens, g.k, g.h}}).path;
    if (path == OpPath::kBlas) {
      productLock.lock();
      if (const void* product = vendorGemm({g.a, g.w, g.tokens, g.k, g.h, dt}, stream, capturing)) {
        routed.a = static_cast<const uint8_t*>(product);
        routed.w = nullptr;
      }
    }
  }
  dev::GemmAllToAllOp::pack(routed, d);
  d.sig = signature(dev::SigOp::kGemmAllToAll, dt, sigHash({g.h}), sigHash({d.recv}));
  return submit(d, recvBytes, stream, capturing);
}

const void* Comm::vendorGemm(const GemmOperands& g, void* stream, bool capturing) {
  requireHealthy();
  std::lock_guard<std::mutex> lock(submitMutex_);
  return engine_->vendorGemm(g, stream, capturing);
}

uint32_t Comm::signature(dev::SigOp op, dev::DType dt, uint32_t shapeHash, uint32_t offsetHash) const {
  return checkSignatures_ ? dev::makeSignature(op, static_cast<uint32_t>(dt), shapeHash, offsetHash) : 0;
}

}  // namespace weft
