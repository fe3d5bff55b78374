#include "comm.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "common/log.hpp"
#include "common/process.hpp"
#include "device/signature_device.hpp"
#include "service/attach.hpp"
#include "service/staging.hpp"
#include "service/weftd_inputs.hpp"
#include "status_page.hpp"
#include "status_watch.hpp"
#include "weft/version.h"

namespace weft {

using dev::Status;

namespace {

// What every rank tells the others at init.
struct RankInfo {
  uint64_t hostHash;
  uint64_t tileBytes;
  uint64_t oneShotBytes;
  uint64_t gemvScratchBytes;
  uint64_t inboxSlots;
  uint64_t heapBytes;
  uint64_t pathTable;  // the path table's fingerprint
  uint64_t gemvPath;   // 0 auto, 1 + OpPath forced
  uint64_t oneShotLinesFrom;
  uint64_t oneShotAuto;  // oneshot_max_bytes left to auto (through the proxy: autoProxyOneShotBytes)
  uint64_t transport;    // 0 auto, 1 p2p, 2 proxy
  uint64_t nodeRanks;
  uint64_t serviceInstance;  // the weftd this rank found (Welcome::instance); 0: none
  uint64_t checkSignatures;
  uint64_t procStart;     // ProcessIdentity: the peer watch tells a reused pid,
  uint64_t pidNamespace;  // and leaves alone ranks whose pids mean nothing here
  int32_t pid;
  char hostname[60];
  char device[32];    // Engine::deviceKey(): ranks of a host with the same one share a GPU
  char gpuModel[64];  // gpuModel(), cut to fit: rank 0's is the one the path table is read for
};

// How a setting's value reads in the error of ranks that disagree on it.
using Describe = std::string (*)(uint64_t);
std::string asNumber(uint64_t v) { return std::to_string(v); }

void checkAgree(const std::vector<RankInfo>& all, uint64_t RankInfo::*field, const char* name, int me,
                Describe describe = asNumber) {
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].*field != all[me].*field)
      throw Error(Code::kInvalidUsage, std::string(name) + ": rank " + std::to_string(r) + " uses " +
                                           describe(all[r].*field) + ", rank " + std::to_string(me) + " uses " +
                                           describe(all[me].*field) + "; every rank must use the same value");
}

// oneshot_protocol: when the one-shot AllReduce sends 128-byte lines. `auto` takes them where the
// engine says they hold (the CPU; a CUDA GPU with an active NVLink: Engine::linesSafe), once there
// are bytes to save: below ~128 KB sent in all the 8-byte lines were slightly faster on 2 and 4 H200
// (docs/archive/perf-journal-2026-11.md). HIP keeps the 8-byte lines: nothing here shows that its GPUs move a
// warp's 128-byte access as one unit.
constexpr uint64_t kLinesFromBytesSent = 128 << 10;

uint64_t oneShotLinesSetting(const std::string& v) {
  if (v == "ll128" && std::string(WEFT_BUILD_GPU) == "hip")
    throw Error(Code::kNotSupported, "oneshot_protocol: ll128 is not supported by HIP builds (use ll or auto)");
  if (v == "ll128") return kLinesAlways;
  return v == "auto" && Engine::linesSafe() ? kLinesFromBytesSent : kLinesNever;
}

// The one-shot AllReduce's wire format, from the bytes an op sends from which it takes 128-byte lines.
std::string linesDescription(uint64_t from) {
  return from == kLinesNever    ? std::string("8-byte lines")
         : from == kLinesAlways ? std::string("128-byte lines")
                                : "128-byte lines from " + std::to_string(from >> 10) + " KB sent";
}

// RankInfo::gemvPath: 0 for auto, else 1 + the forced OpPath.
std::string gemvPathDescription(uint64_t v) {
  return v == 0 ? std::string("auto") : std::string(pathName(static_cast<OpPath>(v - 1)));
}

// The status watch (GPU backends): how long it waits for one read of the launched engine's count
// before trying again at its next look.
constexpr double kWatchReadSeconds = 0.5;

}  // namespace

bool Comm::hostSeesEnd() {
  static const bool cpu = std::string(WEFT_BUILD_GPU) == "cpu";
  return cpu;
}

std::unique_ptr<Comm> Comm::create(const UniqueId& id, int rank, int nranks, const Settings& s) {
  std::unique_ptr<Comm> c(new Comm(rank, nranks, s));
  c->timeoutNs_ = static_cast<uint64_t>(s.getDouble("timeout_s") * 1e9);
  c->tileBytes_ = static_cast<uint64_t>(s.getInt("tile_bytes"));
  c->checkIndices_ = s.getInt("check_indices") != 0;
  c->checkSignatures_ = s.getInt("check_signatures") != 0;
  c->pathTable_ = PathTable::load(s.getString("path_table_file"));
  c->gemvForced_ = pathSetting(FusedOp::kGemvAllReduce, s.getString("gemv_path"), "gemv_path");
  c->gemmForced_ = pathSetting(FusedOp::kGemmAllToAll, s.getString("gemm_path"), "gemm_path");
  c->embeddingForced_ = pathSetting(FusedOp::kEmbeddingAllToAll, s.getString("embedding_path"), "embedding_path");
  c->oneShotLinesFrom_ = oneShotLinesSetting(s.getString("oneshot_protocol"));
  c->host_ = localHost();
  c->boot_ = Bootstrap::join(id, rank, nranks, s.getDouble("bootstrap_timeout_s"));
  std::string noDaemon;
  c->daemon_ = service::findDaemon(s, &noDaemon);

  RankInfo mine{};
  mine.hostHash = c->host_.hash;
  mine.tileBytes = c->tileBytes_;
  auto lines = [](int64_t bytes) { return (static_cast<uint64_t>(bytes) + 255) / 256 * 256; };
  mine.oneShotBytes =
      lines(s.isAuto("oneshot_max_bytes") ? autoOneShotBytes(nranks, c->oneShotLinesFrom_ != kLinesNever)
                                          : s.getInt("oneshot_max_bytes"));
  mine.gemvScratchBytes = lines(s.getInt("gemv_scratch_bytes"));
  mine.inboxSlots = static_cast<uint64_t>(s.getInt("inbox_slots"));
  mine.heapBytes = static_cast<uint64_t>(s.getInt("heap_bytes"));
  mine.pathTable = c->pathTable_.fingerprint();
  mine.gemvPath = c->gemvForced_ ? 1 + static_cast<uint64_t>(*c->gemvForced_) : 0;
  mine.oneShotLinesFrom = c->oneShotLinesFrom_;
  mine.oneShotAuto = s.isAuto("oneshot_max_bytes") ? 1 : 0;
  const std::string transportMode = s.getString("transport");
  mine.transport = transportMode == "p2p" ? 1 : transportMode == "proxy" ? 2 : 0;
  mine.nodeRanks = static_cast<uint64_t>(s.getInt("node_ranks"));
  mine.serviceInstance = c->daemon_ ? c->daemon_->welcome().instance : 0;
  mine.checkSignatures = c->checkSignatures_ ? 1 : 0;
  const ProcessIdentity self = thisProcess();
  mine.pid = self.pid;
  mine.procStart = self.start;
  mine.pidNamespace = self.pidNamespace;
  snprintf(mine.hostname, sizeof mine.hostname, "%s", c->host_.hostname.c_str());
  snprintf(mine.device, sizeof mine.device, "%s", Engine::deviceKey().c_str());
  snprintf(mine.gpuModel, sizeof mine.gpuModel, "%s", gpuModel().c_str());
  std::vector<RankInfo> all(nranks);
  c->boot_->allGather(&mine, sizeof mine, all.data());
  checkAgree(all, &RankInfo::tileBytes, "tile_bytes", rank);
  checkAgree(all, &RankInfo::oneShotBytes, "oneshot_max_bytes", rank);
  checkAgree(all, &RankInfo::gemvScratchBytes, "gemv_scratch_bytes", rank);
  checkAgree(all, &RankInfo::oneShotLinesFrom, "oneshot_protocol", rank, linesDescription);
  checkAgree(all, &RankInfo::inboxSlots, "inbox_slots", rank);
  checkAgree(all, &RankInfo::heapBytes, "heap_bytes", rank);
  // Every rank must take the same path (a fused op's items wait on their peers'): the same table,
  // read for the same GPU model (rank 0's: a job on mixed GPUs still decides alike).
  checkAgree(all, &RankInfo::pathTable, "path_table_file (the table's fingerprint)", rank);
  c->pathPlacement_.gpu = std::string(all[0].gpuModel, strnlen(all[0].gpuModel, sizeof all[0].gpuModel));
  c->pathPlacement_.nranks = nranks;
  checkAgree(all, &RankInfo::gemvPath, "gemv_path", rank, gemvPathDescription);
  // Paths must be symmetric: a rank that maps a peer which reaches it through the proxy would wait
  // for signals that never come.
  checkAgree(all, &RankInfo::transport, "transport", rank, [](uint64_t v) {
    return std::string(v == 1 ? "p2p" : v == 2 ? "proxy" : "auto");
  });
  checkAgree(all, &RankInfo::nodeRanks, "node_ranks", rank);
  // A rank that checks op signatures waits for words that a rank that does not never sends.
  checkAgree(all, &RankInfo::checkSignatures, "check_signatures", rank);

  const bool forceProxy = mine.transport == 2;
  const auto nodeRanks = static_cast<int>(mine.nodeRanks);
  std::string pathList;
  bool anyProxy = false;
  for (int r = 0; r < nranks; ++r) {
    c->paths_.push_back(transport::choosePath(rank, r, transport::nodeOf(mine.hostHash, rank, nodeRanks),
                                              transport::nodeOf(all[r].hostHash, r, nodeRanks), forceProxy));
    if (mine.transport == 1 && c->paths_.back() == transport::Path::kProxy)
      throw Error(Code::kInvalidUsage, "transport: p2p was asked for, but rank " + std::to_string(r) + " is on " +
                                           (all[r].hostHash == mine.hostHash ? std::string("another node (node_ranks)")
                                                                             : "host " + std::string(all[r].hostname)));
    anyProxy |= c->paths_.back() == transport::Path::kProxy;
    pathList += (r ? ", " : "") + std::to_string(r) + ":" + transport::pathName(c->paths_.back());
  }
  // 128-byte lines rely on a line landing whole, which no network promises: through the proxy the
  // one-shot exchange sends 8-byte words (each whole: the proxy delivers them so). Every rank of a
  // job with proxy peers has some, so all decide alike.
  if (anyProxy) c->oneShotLinesFrom_ = kLinesNever;
  c->proxyPeers_ = anyProxy;
  WEFT_LOG(kInfo, kInit, "rank {}: paths to peers {}; one-shot AllReduce in {}", rank, pathList,
           linesDescription(c->oneShotLinesFrom_));

  c->layout_.nranks = static_cast<uint32_t>(nranks);
  c->layout_.inboxSlots = static_cast<uint32_t>(mine.inboxSlots);
  c->layout_.tileBytes = c->tileBytes_;
  // The flagged exchange's scratch serves the one-shot AllReduce, the staged All-to-All (through
  // the proxy) and the fused GEMV's partials.
  c->oneShotMax_ = mine.oneShotBytes;
  // Through the proxy the one-shot's flagged words travel as messages stored a word at a time, and
  // each rank sends all of its input to every peer, so it pays only where latency is the cost:
  // `auto` there means a few KB sent in all (autoProxyOneShotBytes). `auto` itself must be every
  // rank's choice, not only the bytes it stands for: a rank that set a value would run the
  // one-shot where the others do not, and both would wait.
  if (anyProxy) {
    const std::string what = "oneshot_max_bytes (through the host proxy, auto means up to " +
                             std::to_string(autoProxyOneShotBytes(2) >> 10) + " KB sent in all)";
    checkAgree(all, &RankInfo::oneShotAuto, what.c_str(), rank,
               [](uint64_t v) { return std::string(v ? "auto" : "a value"); });
  }
  if (anyProxy && mine.oneShotAuto) c->oneShotMax_ = autoProxyOneShotBytes(nranks);
  c->gemvScratch_ = mine.gemvScratchBytes;
  c->layout_.oneShotBytes = std::max(mine.oneShotBytes, mine.gemvScratchBytes);
  transport::ProxyOptions proxy;
  proxy.backend = s.getString("proxy_backend");
  proxy.cpu = static_cast<int>(s.getInt("proxy_cpu"));
  proxy.eagerBytes = static_cast<uint64_t>(s.getInt("proxy_eager_bytes"));
  proxy.batchBytes = static_cast<uint64_t>(s.getInt("proxy_batch_bytes"));
  proxy.lanes = static_cast<int>(s.getInt("proxy_lanes"));
  proxy.timeoutS = s.getDouble("timeout_s");
  std::vector<service::RankFinding> found;
  for (const RankInfo& r : all) found.push_back({r.serviceInstance, r.hostHash});
  const auto depth = static_cast<uint32_t>(s.getInt("queue_depth"));
  uint32_t engineWorkers = 0;  // weftd's engine's, where it runs the engine
  if (service::decide(s, found, rank, noDaemon)) {
    // The one seam of service mode: weftd makes the heap segments and the queue; what runs over
    // them is the same as embedded.
    uint8_t idBytes[kUniqueIdBytes];
    id.encode(idBytes);
    service::Attach a{};
    a.commId = status::commId(idBytes, sizeof idBytes);
    a.rank = rank;
    a.nranks = nranks;
    a.heapBytes = c->layout_.controlBytes() + mine.heapBytes;
    a.queueDepth = depth;
    a.workers = static_cast<uint32_t>(s.getInt("persistent_ctas"));
    a.inboxSlots = c->layout_.inboxSlots;
    a.tileBytes = c->layout_.tileBytes;
    a.oneShotBytes = c->layout_.oneShotBytes;
    a.timeoutNs = c->timeoutNs_;
    // On a GPU backend weftd makes each rank's heap on the rank's GPU, so the attach names them.
    a.deviceHeaps = mine.device[0] != '\0' ? 1 : 0;
    a.engineInWeftd = s.getString("service_engine") == "weftd" ? 1 : 0;
    // A GPU engine in weftd maps the inputs instead of staging them.
    if (a.engineInWeftd && !a.deviceHeaps) {
      a.stagingBytes = static_cast<uint64_t>(s.getInt("service_staging_bytes"));
      if (a.stagingBytes == 0)
        throw Error(Code::kInvalidArgument,
                    "service_staging_bytes: 0 leaves weftd's engine (service_engine weftd) no way to read inputs "
                    "outside the symmetric heap; set it above 0, or service_engine=rank to run the engine here");
    }
    for (int r = 0; r < nranks && a.deviceHeaps; ++r)
      if ((a.gpus[r] = service::packPciId(std::string(all[r].device, strnlen(all[r].device, sizeof all[r].device)))) ==
          0)
        throw Error(Code::kInvalidUsage, "service: rank " + std::to_string(r) + " named no GPU weftd can find");
    service::Client::Attachment got = c->daemon_->attach(a);
    // No rank goes on (and could end) before every rank has attached: weftd lets a communicator
    // go once none of its ranks is attached.
    c->boot_->barrier();
    c->heap_ = std::make_unique<SymmetricHeap>(rank, got.heapFds, mine.heapBytes, c->layout_);
    c->queue_ = std::make_unique<WorkQueue>(depth, std::move(got.queue));
    if (got.engineInWeftd == 2)
      c->weftdInputs_ =
          std::make_unique<service::WeftdInputs>(*c->daemon_, c->heap_->base(rank), a.heapBytes, got.weftdHeapBase);
    if (got.engineInWeftd == 1)
      c->staging_ = std::make_unique<service::Staging>(std::move(got.staging), got.weftdStagingBase,
                                                       c->heap_->base(rank), a.heapBytes, got.weftdHeapBase);
    if (got.engineInWeftd) {
      engineWorkers = got.engineWorkers;
      // weftd runs the engine: a weftd that goes fails the ops at once instead of at the stall bound.
      // On a GPU the ops' ends are stream waits on their slots' done words, which nothing else
      // would write now: they are completed (as aborted) here.
      WorkQueue* queue = c->queue_.get();
      c->daemon_->watch([queue, pid = c->daemon_->welcome().pid] {
        queue->failPeerGone(-1, pid, kGoneSeenByWeftd);  // raises `abort`: a later submit sees it
        if (!hostSeesEnd()) queue->completeAborted();
      });
    }
  } else {
    c->daemon_.reset();
    c->heap_ = std::make_unique<SymmetricHeap>(*c->boot_, c->paths_, mine.heapBytes, c->layout_, proxy);
    c->queue_ = std::make_unique<WorkQueue>(depth);
  }

  for (int r = 0; r < nranks; ++r) c->peerBases_.push_back(c->heap_->base(r));

  dev::CommView v;
  v.rank = rank;
  v.nranks = nranks;
  v.heap = c->heap_->engineBases();
  v.layout = c->layout_;
  v.queue = c->queue_->header();
  v.slots = c->queue_->slots();
  v.alive = c->queue_->alive();
  v.control = reinterpret_cast<dev::EngineControl*>(c->heap_->base(rank));
  v.timeoutNs = c->timeoutNs_;
  v.idleNs = static_cast<uint64_t>(s.getInt("engine_idle_us")) * 1000;
  // Ops are cut into items for the engine's workers: weftd's engine may have fewer than asked.
  int workers = static_cast<int>(s.getInt("persistent_ctas"));
  if (engineWorkers > 0) workers = std::min(workers, static_cast<int>(engineWorkers));
  c->engineWorkers_ = static_cast<uint32_t>(workers);
  // The path table's per_gpu is the most ranks on any one GPU, so that every rank reads the same
  // rows; the engine sizes its grids by the ranks on its own.
  std::map<std::pair<uint64_t, std::string>, int> onDevice;  // ranks per (host, device)
  for (auto& r : all) {
    r.device[sizeof r.device - 1] = '\0';
    if (r.device[0] != '\0') ++onDevice[{r.hostHash, r.device}];
  }
  for (const auto& [device, ranks] : onDevice) c->pathPlacement_.perGpu = std::max(c->pathPlacement_.perGpu, ranks);
  const int sharers = mine.device[0] != '\0' ? onDevice[{mine.hostHash, mine.device}] : 0;
  c->engine_ = std::make_unique<Engine>(v, *c->queue_, workers,
                                        c->staging_ || c->weftdInputs_ ? std::string("weftd") : s.getString("engine"),
                                        sharers, c->heap_->proxy() != nullptr);
  c->engine_->boundHandovers(static_cast<uint64_t>(s.getDouble("engine_handover_s") * 1e9));
  // A fault the proxy sees (a dead peer, a dropped connection) fails the communicator at once: every
  // wait of the engine gives up, naming the peer and the back-end's own words (failureText). The
  // proxy's thread calls this until ~Comm takes it back, before the queue and the engine go.
  if (transport::Proxy* px = c->heap_->proxy())
    px->onFault([queue = c->queue_.get(), engine = c->engine_.get()](const transport::PeerFault& f) {
      queue->failTransport(f.peer);
      engine->raise({&dev::EngineControl::error});
    });
  // weftd's GPU kernel leaves when its queue idles (service_engine_idle_us); the rank's next op
  // asks for it again.
  if (c->weftdInputs_) c->engine_->setWake([daemon = c->daemon_.get()] { daemon->wake(); });
  if (s.getInt("status_pages")) {
    c->startStatusPage(id, s.getString("status_dir"), std::chrono::milliseconds(s.getInt("status_interval_ms")));
    // weftd sees its ranks' ends itself (service mode); proxy peers, the proxy does.
    std::vector<ProcessIdentity> peers(nranks);
    for (int r = 0; r < nranks; ++r)
      if (c->paths_[r] == transport::Path::kP2p)
        peers[r] = ProcessIdentity{all[r].pid, all[r].procStart, all[r].pidNamespace, all[r].hostHash};
    if (!c->daemon_ && ProcessWatch::anyWatchable(peers))
      c->startPeerWatch(std::move(peers), id, s.getString("status_dir"));
  }
  WEFT_LOG(kInfo, kInit, "rank {}/{} on {} ready: {}, queue depth {}, tile {} bytes{}", rank, nranks, c->host_.hostname,
           c->engine_->describe(), c->queue_->depth(), c->tileBytes_, c->daemon_ ? ", heap and queue from weftd" : "");
  return c;
}

void Comm::startStatusPage(const UniqueId& id, const std::string& dir, std::chrono::milliseconds watchInterval) {
  uint8_t idBytes[kUniqueIdBytes];
  id.encode(idBytes);
  status::Identity who;
  who.commId = status::commId(idBytes, sizeof idBytes);
  who.rank = rank_;
  who.nranks = nranks_;
  who.host = host_.hostname;
  who.device = Engine::deviceKey().empty() ? std::string(WEFT_BUILD_GPU) : Engine::deviceKey();
  who.engine = engine_->describe();
  who.paths = paths_;
  page_ = status::Page::create(status::directory(dir), who, queue_->depth());
  if (!page_) return;
  queue_->reportProgress(page_->progress());
  // The proxy goes with the heap, after the page (~Comm).
  if (const transport::Proxy* px = heap_->proxy())
    page_->countProxyTraffic([px] {
      const transport::Proxy::Traffic t = px->traffic();
      return status::ProxyCounts{t.parts, t.messages, t.batches, t.writes};
    });
  // A GPU's ops end on the caller's stream, where no host wait sees them: the watch does.
  if (!hostSeesEnd() && watchInterval.count() > 0) {
    Engine* engine = engine_.get();
    StatusWatch::ReadItems read;
    if (engine->countsItems()) read = [engine] { return engine->itemsFinished(kWatchReadSeconds); };
    watch_ = std::make_unique<StatusWatch>(*page_, *queue_, std::move(read), watchInterval);
  }
}

void Comm::startPeerWatch(std::vector<ProcessIdentity> peers, const UniqueId& id, const std::string& dir) {
  uint8_t idBytes[kUniqueIdBytes];
  id.encode(idBytes);
  const uint64_t comm = status::commId(idBytes, sizeof idBytes);
  // A rank removes its page when it destroys the communicator: one that ended with its page still
  // there did not (a rank without a page counts as having left cleanly: the wait's timeout stays).
  auto ended = [this, comm, where = status::directory(dir)](int r, const ProcessIdentity& p) {
    if (!status::pageRemains(where, comm, r, p.pid)) return true;
    WEFT_LOG(kError, kInit,
             "rank {}: rank {}'s process (pid {}) ended without destroying the communicator: its ops fail", rank_, r,
             p.pid);
    queue_->failPeerGone(r, p.pid, kGoneSeenByRank);
    engine_->raise({&dev::EngineControl::error});
    return false;  // the communicator has failed: nothing more to tell
  };
  peerWatch_ = std::make_unique<ProcessWatch>(std::move(peers), std::chrono::milliseconds(50), std::move(ended));
}

Comm::~Comm() {
  peerWatch_.reset();  // it fails the queue and the engine
  watch_.reset();      // it reads the page, the queue and the engine
  if (queue_) queue_->reportProgress(nullptr);
  page_.reset();
  // The proxy outlives the queue (it goes with the heap): it must not report into a freed one.
  transport::Proxy* proxy = heap_ ? heap_->proxy() : nullptr;
  if (proxy) proxy->onFault(nullptr);
  const bool aborted = queue_ && prim::atomicLoad<prim::Order::kAcquire>(&queue_->header()->abort) != 0;
  if (queue_) prim::atomicStore<prim::Order::kRelease>(&queue_->header()->stop, 1u);
  if (engine_) engine_->raise({&dev::EngineControl::stop});
  // weftd's engine (where it runs this rank's) has stopped once the detach returns.
  if (daemon_) daemon_->detach();
  const bool released = engine_ ? engine_->stop() : true;
  engine_.reset();
  // Once the engine posts no more: what it posted still goes to the peers (they may wait for it),
  // unless the communicator was aborted.
  // A proxy thread left stuck in the network library (a peer died holding its lock) may still
  // apply arrivals to the heap and read the mirrors: they are leaked with it.
  const bool proxyStopped = proxy ? proxy->stop(/*drain=*/!aborted) : true;
  if (!proxyStopped) (void)heap_.release();
  if (!released) {
    // A kernel may still read or write them: unmapping would fault the GPU, leaking costs memory.
    (void)heap_.release();
    (void)queue_.release();
  }
}

Comm::Comm(int rank, int nranks, const Settings& s) : rank_(rank), nranks_(nranks), settings_(s) {}

void* Comm::memAlloc(uint64_t bytes) {
  const std::optional<uint64_t> off = heap_->allocate(bytes);
  struct Result {
    uint64_t ok;
    uint64_t offset;
    uint64_t bytes;
  };
  const Result mine{off.has_value(), off.value_or(0), bytes};
  std::vector<Result> all(nranks_);
  try {
    boot_->allGather(&mine, sizeof mine, all.data());
  } catch (...) {
    if (off) heap_->release(*off);
    throw;
  }
  // Sizes first: a rank that asked for another size is the cause, whatever the offsets say, and
  // every rank sees the same table, so every rank fails this call (not a later one).
  for (int r = 0; r < nranks_; ++r) {
    if (all[r].bytes == bytes) continue;
    if (off) heap_->release(*off);
    const int low = std::min(r, rank_), high = std::max(r, rank_);
    throw Error(Code::kInvalidUsage, "bytes: rank " + std::to_string(low) + " asked for " +
                                         std::to_string(all[low].bytes) + " bytes and rank " + std::to_string(high) +
                                         " for " + std::to_string(all[high].bytes) +
                                         "; every rank must call weft_mem_alloc with the same size");
  }
  for (int r = 0; r < nranks_; ++r) {
    if (all[r].ok && (!off || all[r].offset == *off)) continue;
    if (off) heap_->release(*off);
    if (!all[r].ok)
      throw Error(Code::kOutOfMemory, "bytes: rank " + std::to_string(r) + " has no free block of " +
                                          std::to_string(bytes) + " bytes in its symmetric heap (this rank has " +
                                          std::to_string(heap_->freeBytes()) + " bytes free); raise heap_bytes");
    throw Error(Code::kInvalidUsage,
                "weft_mem_alloc: ranks got different offsets; every rank must call weft_mem_alloc and "
                "weft_mem_free with the same sizes in the same order");
  }
  return heap_->base(rank_) + *off;
}

void Comm::memFree(void* p) {
  const std::optional<uint64_t> off = heap_->offsetInBlock(p, 0);
  uint64_t mine = off ? *off : ~uint64_t{0};
  std::vector<uint64_t> all(nranks_);
  boot_->allGather(&mine, sizeof mine, all.data());
  if (!off) throw Error(Code::kInvalidArgument, "ptr: not a block returned by weft_mem_alloc on this communicator");
  for (int r = 0; r < nranks_; ++r)
    if (all[r] != mine)
      throw Error(Code::kInvalidUsage, "ptr: rank " + std::to_string(r) +
                                           " freed a different block; every rank must free the same blocks in the "
                                           "same order");
  if (!heap_->release(*off)) throw Error(Code::kInvalidArgument, "ptr: points inside a block, not at its start");
}

uint64_t Comm::heapOffset(const void* p, uint64_t bytes, const char* arg) const {
  if (auto off = heap_->offsetInBlock(p, bytes)) return *off;
  if (heap_->offsetInBlock(p, 0) || heap_->overlaps(p, 1))
    throw Error(Code::kInvalidArgument, std::string(arg) + ": " + std::to_string(bytes) +
                                            " bytes run past the end of its weft_mem_alloc block");
  // The addresses, so that a pointer from another communicator or a translated view is told apart.
  char where[96];
  snprintf(where, sizeof where, " (%p; this communicator's heap is %p + %llu bytes)", p,
           static_cast<const void*>(heap_->base(rank_)), static_cast<unsigned long long>(heap_->segmentBytes()));
  throw Error(Code::kInvalidArgument, std::string(arg) +
                                          ": must be a buffer from weft_mem_alloc on this communicator (the "
                                          "symmetric heap)" +
                                          where);
}

void Comm::requireHealthy() const {
  std::string msg;
  if (Code e = asyncError(&msg); e != Code::kSuccess)
    throw Error(e, "communicator has failed earlier and must be destroyed: " + msg);
}

void Comm::abort() {
  prim::atomicStore<prim::Order::kRelease>(&queue_->header()->abort, 1u);
  engine_->raise({&dev::EngineControl::abort});
  if (page_) page_->aborted();
  WEFT_LOG(kWarn, kInit, "rank {}: communicator aborted", rank_);
}

void Comm::finalize() {
  // Bounded by progress: gives up only when no op completed for a whole stall period.
  uint64_t last = ~uint64_t{0}, lastMove = prim::nowNs();
  for (uint32_t spins = 0; queue_->inFlight() != 0; ++spins) {
    const uint64_t done = prim::atomicLoad<prim::Order::kAcquire>(&queue_->header()->completed);
    if (done != last) {
      last = done;
      lastMove = prim::nowNs();
    } else if (prim::nowNs() - lastMove > stallNs()) {
      throw Error(Code::kTimeout, "weft_comm_finalize: " + std::to_string(queue_->inFlight()) +
                                      " op(s) still in flight and none finished for " +
                                      std::to_string(stallNs() / 1000000000ull) + " s");
    }
    prim::relax(spins);
  }
  if (!engine_->quiesce(static_cast<double>(stallNs()) / 1e9))
    throw Error(Code::kTimeout, "weft_comm_finalize: ops still running on the caller's streams after " +
                                    std::to_string(stallNs() / 1000000000ull) + " s");
  boot_->barrier();
  // Every rank has finished every op: a peer that now closes its connections is no fault.
  if (heap_->proxy()) heap_->proxy()->closing();
}

Code Comm::asyncError(std::string* message) const {
  const auto* h = queue_->header();
  const Status st = failureStatus(*h);
  if (st == Status::kOk && !prim::atomicLoad<prim::Order::kAcquire>(&h->abort)) return Code::kSuccess;
  if (message) *message = failureText();
  if (message && message->empty()) *message = "the communicator was aborted";
  // A failure of no kind of its own (a peer's), or none but the abort: the communicator was aborted.
  const auto c = codeOfKind(st);
  return c && *c != Code::kSuccess ? *c : Code::kAborted;
}

ExternalView Comm::externalView() const {
  for (int r = 0; r < nranks_; ++r)
    if (paths_[r] == transport::Path::kProxy)
      throw Error(Code::kNotSupported,
                  "rank " + std::to_string(r) +
                      " is reached through the host proxy (another node, or transport=proxy): its heap is not mapped "
                      "into this process, so only weft's own ops reach it");
  dev::QueueHeader* h = queue_->header();
  return ExternalView{&peerBases_, heap_->segmentBytes(), timeoutNs_, h, engine_->queueOnDevice(&h->stop)};
}

std::string Comm::failureText() const {
  if (failureStatus(*queue_->header()) == Status::kTransport)
    if (const transport::Proxy* px = heap_->proxy())
      if (const auto f = px->fault()) return f->what;
  return queue_->failureText(rank_);
}

}  // namespace weft
