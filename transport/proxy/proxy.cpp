#include "proxy.hpp"

#include <hwloc.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>

#include "common/error.hpp"
#include "common/log.hpp"
#include "device/primitives_device.hpp"
#include "device/sleep_slack.hpp"

namespace weft::transport {

namespace {

// What each rank found when it opened its back-end, gathered before anything collective, so that
// a rank whose back-end failed or differs fails every rank at once instead of leaving them waiting.
struct OpenReport {
  char backend[16];
  char error[480];
  uint64_t host;         // thisHostHash(): the ranks sharing its CPUs
  int32_t lanes;         // proxy_lanes (0: auto)
  int32_t cpus;          // CPUs this process may run on
  int32_t copiesWrites;  // the back-end's writes are CPU copies
  int32_t pid;
  uint64_t procStart, pidNamespace;
};

std::string openOne(const std::string& name, const std::vector<uint8_t>& viaProxy, Region heap,
                    const std::vector<Region>& mirrors, ArrivalOrder* arrivals, std::unique_ptr<NetBackend>* out) {
  try {
    auto b = makeBackend(name);
    b->open(viaProxy, heap, mirrors, arrivals);
    *out = std::move(b);
    return "";
  } catch (const Error& e) {
    return name + ": " + e.what();
  }
}

void bindTo(int cpu) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) throw Error(Code::kSystem, "proxy_cpu: hwloc cannot initialise");
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    throw Error(Code::kSystem, "proxy_cpu: hwloc cannot load the topology");
  }
  hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(topo, static_cast<unsigned>(cpu));
  const int rc = pu ? hwloc_set_cpubind(topo, pu->cpuset, HWLOC_CPUBIND_THREAD) : -1;
  hwloc_topology_destroy(topo);
  if (!pu) throw Error(Code::kInvalidArgument, "proxy_cpu: this machine has no PU " + std::to_string(cpu));
  if (rc != 0)
    throw Error(Code::kSystem, "proxy_cpu: binding the proxy thread to PU " + std::to_string(cpu) + " failed");
}

int cpusAllowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return static_cast<int>(std::thread::hardware_concurrency());
  return CPU_COUNT(&set);
}

// How often the watch looks at the processes of its host's peers.
constexpr auto kWatchInterval = std::chrono::milliseconds(50);

}  // namespace

int lanesWanted(int setting, bool copiesWrites, int cpus, int ranksOnHost) {
  if (setting > 0) return setting;
  if (!copiesWrites) return 1;
  return std::clamp(cpus / (2 * std::max(1, ranksOnHost)), 1, 4);
}

Proxy::Proxy(Exchange& ex, const std::vector<uint8_t>& viaProxy, Region heap, const ProxyOptions& options)
    : nranks_(ex.nranks()),
      heap_(heap),
      viaProxy_(viaProxy),
      mirrors_(ex.nranks()),
      cpu_(options.cpu),
      eagerBytes_(std::min(options.eagerBytes, kMsgPayloadMax)) {
  // Device code claims up to a burst of slots at once (comm_device.hpp, postTriggers).
  if (options.depth < 16 || (options.depth & (options.depth - 1)) != 0)
    throw Error(Code::kInvalidArgument, "proxy ring depth must be a power of two of at least 16");
  try {
    start(ex, heap, options);
  } catch (...) {
    stop(false);     // threads that started, if a later step failed
    lanes_.clear();  // its registrations go before the memory they name
    unmapAll();
    throw;
  }
  WEFT_LOG(kInfo, kProxy, "rank {}: {}", ex.rank(), describe());
}

void Proxy::unmapAll() {
  for (auto& m : mirrors_)
    if (m.base) munmap(m.base, m.bytes);
  if (shared_.base) munmap(shared_.base, shared_.bytes);
  mirrors_.assign(mirrors_.size(), Region{});
  shared_ = Region{};
}

void Proxy::start(Exchange& ex, Region heap, const ProxyOptions& options) {
  // A mirror per proxy peer, as large as its heap; pages are only backed where the ops write.
  for (int r = 0; r < nranks_; ++r) {
    if (!viaProxy_[r]) continue;
    void* p = mmap(nullptr, heap.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      throwSystemError("mapping a mirror of rank " + std::to_string(r) + "'s heap (" + std::to_string(heap.bytes) +
                       " bytes)");
    mirrors_[r] = Region{static_cast<uint8_t*>(p), heap.bytes};
  }

  arrivals_ = std::make_unique<ArrivalOrder>(nranks_);
  std::unique_ptr<NetBackend> first;
  std::vector<std::string> tried;
  if (options.backend == "auto") {
    for (const auto& name : backendsBuilt()) {
      tried.push_back(openOne(name, viaProxy_, heap, mirrors_, arrivals_.get(), &first));
      if (first) break;
    }
    if (tried.empty()) tried.push_back("no back-end is built into this weft (UCX or libfabric development files)");
  } else if (options.backend == "ucx" || options.backend == "ofi") {
    tried.push_back(openOne(options.backend, viaProxy_, heap, mirrors_, arrivals_.get(), &first));
  } else {
    tried.push_back("proxy_backend: '" + options.backend + "' is not one of auto, ucx, ofi");
  }
  lanes_.push_back(std::make_unique<Lane>());
  lanes_[0]->backend = std::move(first);
  backend_ = lanes_[0]->backend.get();
  OpenReport mine{};
  snprintf(mine.backend, sizeof mine.backend, "%s", backend_ ? backend_->name() : "");
  const ProcessIdentity self = thisProcess();
  mine.host = self.host;
  mine.pid = self.pid;
  mine.procStart = self.start;
  mine.pidNamespace = self.pidNamespace;
  mine.lanes = options.lanes;
  mine.cpus = cpusAllowed();
  mine.copiesWrites = backend_ && backend_->copiesWrites();
  std::string why;
  for (const auto& t : tried)
    if (!t.empty()) why += (why.empty() ? "" : "; ") + t;
  snprintf(mine.error, sizeof mine.error, "%s", why.c_str());
  std::vector<OpenReport> all(nranks_);
  ex.allGather(&mine, sizeof mine, all.data());
  for (int r = 0; r < nranks_; ++r) {
    all[r].backend[sizeof all[r].backend - 1] = all[r].error[sizeof all[r].error - 1] = '\0';
    if (!all[r].backend[0])
      throw Error(r == ex.rank() ? Code::kNotSupported : Code::kTransport,
                  "the host proxy: rank " + std::to_string(r) + " could not open a network back-end (proxy_backend " +
                      options.backend + "; tried " + all[r].error + ")");
  }
  for (int r = 0; r < nranks_; ++r)
    if (strcmp(all[r].backend, all[ex.rank()].backend) != 0)
      throw Error(Code::kInvalidUsage, "proxy_backend: rank " + std::to_string(r) + " opened " + all[r].backend +
                                           ", rank " + std::to_string(ex.rank()) + " opened " + all[ex.rank()].backend +
                                           "; every rank must use the same back-end");
  watched_.assign(nranks_, ProcessIdentity{});
  gone_ = std::make_unique<std::atomic<uint8_t>[]>(nranks_);
  for (int r = 0; r < nranks_; ++r)
    if (viaProxy_[r]) watched_[r] = ProcessIdentity{all[r].pid, all[r].procStart, all[r].pidNamespace, all[r].host};
  // Every rank opens as many lanes as the one that wants fewest: lane i connects to lane i.
  int lanes = 16;
  for (int r = 0; r < nranks_; ++r) {
    int onHost = 0;
    for (int q = 0; q < nranks_; ++q) onHost += all[q].host == all[r].host;
    const int wanted = lanesWanted(all[r].lanes, all[r].copiesWrites != 0, all[r].cpus, onHost);
    if (r == ex.rank()) lanesAsked_ = wanted;
    lanes = std::min(lanes, wanted);
  }
  // A lane that fails to open on one rank fails every rank here, before anything collective that
  // the others would wait in.
  char laneError[256] = {};
  try {
    for (int i = 1; i < lanes; ++i) {
      lanes_.push_back(std::make_unique<Lane>());
      lanes_[i]->backend = makeBackend(backend_->name());
      lanes_[i]->backend->open(viaProxy_, heap, mirrors_, arrivals_.get());
    }
  } catch (const Error& e) {
    snprintf(laneError, sizeof laneError, "%s", e.what());
  }
  std::vector<char> laneErrors(sizeof laneError * nranks_);
  ex.allGather(laneError, sizeof laneError, laneErrors.data());
  for (int r = 0; r < nranks_; ++r) {
    char* why = laneErrors.data() + r * sizeof laneError;
    why[sizeof laneError - 1] = '\0';
    if (why[0])
      throw Error(r == ex.rank() ? Code::kSystem : Code::kTransport,
                  "the host proxy: rank " + std::to_string(r) + " could not open its " + std::to_string(lanes) +
                      " lanes (proxy_lanes): " + why);
  }
  laneLoadMax_ = std::max<uint64_t>(64, ArrivalOrder::kEarlyMax / (4 * static_cast<uint64_t>(lanes)));
  if (lanes > 1 && options.eagerBytes == 0)
    WEFT_LOG(kWarn, kProxy, "proxy_eager_bytes 0 has no effect with {} lanes: every byte goes in messages", lanes);
  patienceNs_ = static_cast<uint64_t>(options.timeoutS * 1e9);
  // A put goes in a message only where one message holds it (ofi: within rxm's eager buffer);
  // with several lanes every byte does.
  messageBytes_ = backend_->messageBytes();
  eagerBytes_ = lanes > 1 ? messageBytes_ : std::min(options.eagerBytes, messageBytes_);
  sent_.assign(nranks_, 0);
  open_.assign(nranks_, OpenBatch{});
  // A part that cannot share a message with at least a signal goes alone.
  batchPartMax_ = std::min(options.batchBytes, std::max(messageBytes_, 2 * sizeof(WirePart)) - 2 * sizeof(WirePart));
  batching_ = options.batchBytes > 0;
  for (auto& lane : lanes_) {
    lane->backend->setPatience(options.timeoutS);
    lane->backend->connect(ex);
  }

  // The ring, then the tail on a line of its own, then the peer flags; zero-filled.
  depth_ = options.depth;
  const uint64_t ringBytes = sizeof(dev::Trigger) * depth_, page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t sharedBytes = (ringBytes + 64 + nranks_ + page - 1) / page * page;
  void* shared = mmap(nullptr, sharedBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) throwSystemError("mapping the host proxy's trigger ring");
  shared_ = Region{static_cast<uint8_t*>(shared), sharedBytes};
  ring_ = reinterpret_cast<dev::Trigger*>(shared_.base);
  tail_ = reinterpret_cast<uint64_t*>(shared_.base + ringBytes);
  sharedViaProxy_ = shared_.base + ringBytes + 64;
  memcpy(sharedViaProxy_, viaProxy_.data(), nranks_);
  view_ = deviceView(shared_.base, &head_, &tailSeen_);
  std::promise<std::string> started;
  auto ready = started.get_future();
  thread_ = std::thread([this, &started] {
    try {
      dev::usePreciseSleeps();  // an idle proxy thread sleeps 5-50 us at a time
      if (cpu_ >= 0) bindTo(cpu_);
      runningOn_ = sched_getcpu();
      started.set_value("");
    } catch (const Error& e) {
      lanes_[0]->ended.store(true, std::memory_order_release);
      started.set_value(e.what());
      return;
    }
    run();
    lanes_[0]->ended.store(true, std::memory_order_release);
  });
  if (const std::string err = ready.get(); !err.empty()) {
    thread_.join();
    throw Error(Code::kInvalidArgument, err);
  }
  for (size_t i = 1; i < lanes_.size(); ++i) {
    Lane& lane = *lanes_[i];
    lane.thread = std::thread([this, &lane] {
      dev::usePreciseSleeps();  // an idle proxy thread sleeps 5-50 us at a time
      runLane(lane);
      lane.ended.store(true, std::memory_order_release);
    });
  }
  // The back-ends tell a peer's end from a goodbye, so the fault is theirs to note: the watch
  // only marks the peer for each lane's thread to tell its back-end (applyGone).
  if (ProcessWatch::anyWatchable(watched_))
    watch_ = std::make_unique<ProcessWatch>(
        watched_, kWatchInterval,
        [this](int r, const ProcessIdentity&) {
          gone_[r].store(1, std::memory_order_relaxed);
          goneCount_.fetch_add(1, std::memory_order_release);
          return true;
        },
        [this] { noteGoneIfStuck(); });
}

bool Proxy::stop(bool drain) {
  if (stopped_) return *stopped_;
  drain_ = drain;
  stop_ = true;
  bool joined = true;
  if (thread_.joinable()) joined = joinUnlessStuck(thread_, *lanes_[0]);
  lanesStop_ = true;  // the proxy thread sets it once the lanes may close; at once if it never ran
  for (size_t i = 1; i < lanes_.size(); ++i)
    if (lanes_[i]->thread.joinable()) joined &= joinUnlessStuck(lanes_[i]->thread, *lanes_[i]);
  watch_.reset();
  const Traffic t = traffic();
  WEFT_LOG(kDebug, kProxy, "host proxy: sent {} heap messages in {} wire messages ({} batches) and {} RMA writes",
           t.parts, t.messages, t.batches, t.writes);
  if (!joined)
    WEFT_LOG(kError, kProxy,
             "host proxy: a thread took no step for {} ms inside {} (a peer that died holding a lock in the "
             "library's shared memory leaves its senders spinning); it is left running, and this communicator's "
             "memory is not freed",
             kStuckMs, backend_ ? backend_->describe() : std::string("its back-end"));
  stopped_ = joined;
  return joined;
}

bool Proxy::joinUnlessStuck(std::thread& thread, const Lane& lane) {
  using Clock = std::chrono::steady_clock;
  uint64_t seen = lane.steps.load(std::memory_order_relaxed);
  auto since = Clock::now();
  while (!lane.ended.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (const uint64_t now = lane.steps.load(std::memory_order_relaxed); now != seen) {
      seen = now;
      since = Clock::now();
    } else if (Clock::now() - since > std::chrono::milliseconds(kStuckMs)) {
      thread.detach();
      return false;
    }
  }
  thread.join();
  return true;
}

Proxy::~Proxy() {
  if (!stop(true)) {
    // A thread left running may still use the back-ends, the arrivals and the mappings.
    for (auto& lane : lanes_) (void)lane.release();
    (void)arrivals_.release();
    return;
  }
  lanes_.clear();
  unmapAll();
}

void Proxy::noteGoneIfStuck() {
  // The proxy thread applies marks within microseconds when it runs.
  const bool behind = goneCount_.load(std::memory_order_acquire) > lanes_[0]->goneSeen.load(std::memory_order_relaxed);
  unappliedLooks_ = behind ? unappliedLooks_ + 1 : 0;
  if (goneNoted_ || unappliedLooks_ < 3 || stop_.load()) return;
  goneNoted_ = true;
  for (int r = 0; r < nranks_; ++r)
    if (gone_[r].load(std::memory_order_relaxed)) noteFault(PeerFault{r, goneText(r)});
}

std::string Proxy::goneText(int peer) const {
  return "rank " + std::to_string(peer) + " (pid " + std::to_string(watched_[peer].pid) + " on this host) has ended";
}

void Proxy::applyGone(Lane& lane) {
  const uint32_t count = goneCount_.load(std::memory_order_acquire);
  if (lane.goneSeen.load(std::memory_order_relaxed) == count) return;
  for (int r = 0; r < nranks_; ++r)
    if (gone_[r].load(std::memory_order_relaxed)) lane.backend->peerGone(r, goneText(r));
  lane.goneSeen.store(count, std::memory_order_relaxed);
}

dev::ProxyView Proxy::deviceView(uint8_t* shared, uint64_t* head, uint64_t* tailSeen) const {
  auto at = [&](const void* p) { return shared + (static_cast<const uint8_t*>(p) - shared_.base); };
  dev::ProxyView v{};
  v.ring = reinterpret_cast<dev::Trigger*>(at(ring_));
  v.head = head;
  v.tail = reinterpret_cast<const uint64_t*>(at(tail_));
  v.tailSeen = tailSeen;
  v.depth = depth_;
  v.packBytes = static_cast<uint32_t>(messageBytes_);
  v.viaProxy = at(sharedViaProxy_);
  return v;
}

std::string Proxy::describe() const {
  const int on = runningOn_.load();
  return std::string("proxy through ") + (backend_ ? backend_->describe() : "no back-end") + "; " +
         std::to_string(lanes_.size()) +
         (lanes_.size() == 1 ? " lane (large tiles as RMA writes" : " lanes (every byte in messages") +
         (lanesAsked_ == static_cast<int>(lanes_.size())
              ? std::string(")")
              : "; this rank asked for " + std::to_string(lanesAsked_) + ", every rank takes the fewest asked)") +
         "; proxy thread " +
         (cpu_ >= 0 ? "bound to PU " + std::to_string(cpu_) : "unbound, last on PU " + std::to_string(on));
}

void Proxy::onFault(std::function<void(const PeerFault&)> sink) {
  std::lock_guard<std::mutex> lock(faultMutex_);
  sink_ = std::move(sink);
  if (sink_ && fault_ && !sunk_) {
    sunk_ = true;
    sink_(*fault_);
  }
}

std::optional<PeerFault> Proxy::fault() const {
  std::lock_guard<std::mutex> lock(faultMutex_);
  return fault_;
}

void Proxy::noteFault(const PeerFault& f) {
  std::lock_guard<std::mutex> lock(faultMutex_);
  if (fault_) return;
  if (closing_) {
    WEFT_LOG(kDebug, kProxy, "host proxy, after every op finished: {}", f.what);
    return;
  }
  fault_ = f;
  WEFT_LOG(kError, kProxy, "host proxy: {}", f.what);
  if (sink_ && !sunk_) {
    sunk_ = true;
    sink_(f);
  }
}

// One trigger, checked: it comes from device code, which names peers and offsets; one that names
// anything outside this rank's mirrors is a bug, and becomes a fault rather than a stray write.
void Proxy::take(uint64_t w0, uint64_t w1) {
  const dev::TriggerKind kind = dev::triggerKind(w0);
  const int peer = dev::triggerPeer(w0);
  const uint64_t offset = dev::triggerOffset(w0);
  auto inMirror = [&](uint64_t at, uint64_t bytes) { return at <= heap_.bytes && bytes <= heap_.bytes - at; };
  if (peer >= nranks_ || !viaProxy_[peer]) {
    noteFault(PeerFault{peer, "a trigger names rank " + std::to_string(peer) + ", which is not a proxy peer"});
    return;
  }
  switch (kind) {
    case dev::TriggerKind::kPut:
      if (!inMirror(offset, w1)) break;
      if (w1) carry(peer, offset, w1);
      return;
    case dev::TriggerKind::kPutRows: {
      const Rows r = rowsOf(w1);
      if (r.rows == 0 || !inMirror(offset, r.span())) break;
      // A tile's rows are short runs at a stride (the embedding's samples, the GEMM's rows): one
      // message carries many, where a put per row costs an operation each (several us over tcp).
      if (r.rowBytes <= eagerBytes_)
        send(peer, kMsgRows, offset, w1);
      else
        for (uint64_t i = 0; i < r.rows; ++i) carry(peer, offset + i * r.stride, r.rowBytes);
      return;
    }
    case dev::TriggerKind::kPutPacked: {
      // Rows the device laid back to back (the embedding's samples): one message, sent from the
      // mirror in place, and the peer's proxy puts each row at its stride.
      const Rows r = rowsOf(w1);
      if (r.rows == 0 || r.payload() > messageBytes_ || (r.rows > 1 && r.stride < r.rowBytes) ||
          !inMirror(offset, r.span()))
        break;
      stage(peer, kMsgPacked, offset, w1);
      return;
    }
    case dev::TriggerKind::kSignalStore:
    case dev::TriggerKind::kSignalAdd:
      if (!inMirror(offset, 8) || offset % 8) break;
      send(peer, static_cast<uint32_t>(kind), offset, w1);
      return;
    case dev::TriggerKind::kDeliver:
      if (!inMirror(offset, w1) || offset % 8 || w1 % 8) break;
      send(peer, kMsgDeliver, offset, w1);
      return;
  }
  noteFault(PeerFault{peer, "a malformed trigger (kind " + std::to_string(static_cast<uint32_t>(kind)) + ", offset " +
                                std::to_string(offset) + ", word " + std::to_string(w1) + ")"});
}

void Proxy::send(int peer, uint32_t kind, uint64_t offset, uint64_t value) {
  cutMessage(kind, offset, value, messageBytes_, [&](uint32_t k, uint64_t at, uint64_t v) { stage(peer, k, at, v); });
}

void Proxy::carry(int peer, uint64_t offset, uint64_t bytes) {
  if (bytes > eagerBytes_ && lanes_.size() == 1) {
    flush(peer);  // what came before goes first, so that its signals need not wait for this write
    backend_->put(peer, offset, bytes);
    bump(writesSent_, 1);
    return;
  }
  for (uint64_t at = 0; at < bytes; at += messageBytes_) {
    const uint64_t n = std::min(messageBytes_, bytes - at);
    stage(peer, kMsgRows, offset + at, rowsValue(Rows{1, n, n}));
  }
}

// Order holds across batches and lone messages alike: a message is numbered when it is sent, and a
// signal is only ever sent in a batch or after the data taken before it, so the receiver, which
// applies a signal once every message numbered before it is applied, never applies it early.
void Proxy::stage(int peer, uint32_t kind, uint64_t offset, uint64_t value) {
  // Flagged data (kMsgDeliver) goes alone: no signal follows it to share a message with, and its
  // receiver stores it a word at a time, which lanes do side by side for messages of their own.
  const uint64_t bytes = payloadBytes(kind, value);
  if (!batching_ || kind == kMsgDeliver || bytes > batchPartMax_) {
    flush(peer);
    dispatch(peer, kind, offset, value);
    return;
  }
  OpenBatch& b = open_[peer];
  const uint64_t need = sizeof(WirePart) + bytes;
  if (!b.parts.empty() && b.bytes + need > messageBytes_) flush(peer);
  b.parts.push_back(MessagePart{kind, offset, value});
  b.bytes += need;
  if (!b.listed) {
    b.listed = true;
    openPeers_.push_back(peer);
  }
}

void Proxy::flush(int peer) {
  OpenBatch& b = open_[peer];
  if (b.parts.size() == 1) {
    const MessagePart p = b.parts.front();
    dispatch(peer, p.kind, p.offset, p.value);
  } else if (b.parts.size() > 1) {
    const uint64_t n = b.parts.size();  // before the move: arguments are set up in no fixed order
    dispatch(peer, kMsgBatch, 0, n, std::move(b.parts));
  }
  b.parts.clear();
  b.bytes = 0;
}

void Proxy::flushAll() {
  for (const int peer : openPeers_) {
    flush(peer);
    open_[peer].listed = false;
  }
  openPeers_.clear();
}

// The proxy thread is the only writer of the traffic counts: a plain store, no locked add, on its
// loop; other threads only read them. Release, so that a reader that takes them in the reverse
// order of their updates (traffic) never sees more batches than wire messages, or more wire
// messages than the messages they carried.
void Proxy::bump(std::atomic<uint64_t>& count, uint64_t n) {
  count.store(count.load(std::memory_order_relaxed) + n, std::memory_order_release);
}

Proxy::Traffic Proxy::traffic() const {
  Traffic t;
  t.batches = batchesSent_.load(std::memory_order_acquire);
  t.messages = messagesSent_.load(std::memory_order_acquire);
  t.parts = partsSent_.load(std::memory_order_acquire);
  t.writes = writesSent_.load(std::memory_order_acquire);
  return t;
}

void Proxy::dispatch(int peer, uint32_t kind, uint64_t offset, uint64_t value, std::vector<MessagePart> parts) {
  const uint32_t seq = sent_[peer]++;
  bump(partsSent_, kind == kMsgBatch ? parts.size() : 1);
  bump(messagesSent_, 1);
  if (kind == kMsgBatch) bump(batchesSent_, 1);
  if (lanes_.size() > 1) waitForRoom();
  size_t best = 0;
  uint64_t least = backend_->outstanding();
  for (size_t i = 1; i < lanes_.size() && least != 0; ++i)
    if (const uint64_t l = lanes_[i]->load(); l < least) {
      least = l;
      best = i;
    }
  if (best == 0) {
    if (kind == kMsgBatch)
      backend_->batch(peer, std::move(parts), seq);
    else
      backend_->message(peer, kind, offset, value, seq);
    return;
  }
  Lane& lane = *lanes_[best];
  lane.queued.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(lane.mutex);
  lane.incoming.push_back(Command{peer, kind, offset, value, seq, std::move(parts)});
}

uint64_t Proxy::lanesLoad(bool most) const {
  uint64_t load = backend_->outstanding();
  for (size_t i = 1; i < lanes_.size(); ++i)
    load = most ? std::max(load, lanes_[i]->load()) : std::min(load, lanes_[i]->load());
  return load;
}

// Every lane at its fill: progress this thread's lane until one has room. A lane that takes
// nothing for timeout_s (its peer gone, its thread stuck) is a fault, and then the message is
// given to it anyway: the op fails by that fault, and nothing waits unbounded here.
void Proxy::waitForRoom() {
  if (lanesLoad(false) < laneLoadMax_) return;
  const uint64_t since = prim::nowNs();
  while (lanesLoad(false) >= laneLoadMax_) {
    lanes_[0]->steps.fetch_add(1, std::memory_order_relaxed);
    applyGone(*lanes_[0]);
    backend_->progress();
    if (const auto f = backend_->fault(); f) noteFault(*f);
    if ((stop_.load(std::memory_order_relaxed) && !drain_.load(std::memory_order_relaxed)) || fault()) return;
    if (prim::nowNs() - since > patienceNs_) {
      noteFault(PeerFault{-1, "the host proxy's lanes took no message for timeout_s"});
      return;
    }
  }
}

// Whether the next slot holds a committed trigger. The engine has stopped when this is asked (no
// slot is claimed and left half-written), so every trigger posted is committed.
bool Proxy::committed() const {
  const uint64_t w0 = prim::atomicLoad<prim::Order::kAcquire>(&ring_[taken_ & (depth_ - 1)].w0);
  return (w0 & dev::kTriggerCommit) == dev::commitFor(taken_, depth_);
}

// Takes up to a ring's worth of committed triggers, then sends the batches they left open. Returns
// how many.
uint32_t Proxy::drainRing() {
  const uint32_t depth = depth_;
  uint32_t n = 0;
  for (; n < depth; ++n) {
    // A lane at its fill: the device waits in the ring. The fullest lane, not the emptiest, so
    // that one slow lane holds back the others, and no sender's messages run further ahead of its
    // oldest one in flight than the receiver keeps (ArrivalOrder::kEarlyMax).
    if (lanes_.size() > 1 && lanesLoad(true) >= laneLoadMax_) break;
    dev::Trigger* t = &ring_[taken_ & (depth - 1)];
    const uint64_t w0 = prim::atomicLoad<prim::Order::kAcquire>(&t->w0);
    if ((w0 & dev::kTriggerCommit) != dev::commitFor(taken_, depth)) break;
    const uint64_t w1 = prim::atomicLoad<prim::Order::kRelaxed>(&t->w1);
    prim::crossProcessAcquire();
    ++taken_;
    prim::atomicStore<prim::Order::kRelease>(tail_, taken_);
    take(w0 & ~dev::kTriggerCommit, w1);
  }
  flushAll();
  return n;
}

void Proxy::run() {
  uint32_t idle = 0;
  std::atomic<uint64_t>& steps = lanes_[0]->steps;
  while (!stop_.load(std::memory_order_relaxed)) {
    steps.fetch_add(1, std::memory_order_relaxed);
    applyGone(*lanes_[0]);
    // Up to a ring's worth of triggers, then progress: neither starves the other.
    bool moved = drainRing() != 0;
    moved |= backend_->progress();
    if (const auto f = backend_->fault(); f) noteFault(*f);
    if (moved) {
      idle = 0;
      continue;
    }
    // Idle: poll hard for a while, then give the core away (ranks, workers and proxies of a job
    // may share few cores): by yielding while operations are in flight (their completions and
    // the peers' replies need this thread), by sleeping in growing steps, at most 50 us, when not.
    ++idle;
    if (idle < 256) continue;
    if (idle < 1024 || backend_->outstanding() != 0)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(idle < 8192 ? 5 : 50));
  }
  // Stopping. A rank's op is done once its own data has arrived and its triggers are posted, not
  // carried: peers may still wait for them (destroy without finalize). So carry everything posted,
  // for at most kDrainMs (a dead peer must not hold destroy), unless aborting.
  constexpr int kDrainMs = 2000;
  backend_->setPatience(0.2);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(drain_ ? kDrainMs : 0);
  auto carried = [&] {
    for (const auto& lane : lanes_)
      if ((lane.get() == lanes_[0].get() ? backend_->outstanding() : lane->load()) != 0) return false;
    return true;
  };
  while (std::chrono::steady_clock::now() < until) {
    if (!committed() && carried()) break;
    steps.fetch_add(1, std::memory_order_relaxed);
    applyGone(*lanes_[0]);
    drainRing();
    backend_->progress();
  }
  // Then tell the peers, so that they take this rank's closing connections for no fault; the
  // other lanes do so on theirs.
  lanesStop_ = true;
  backend_->sayGoodbye();
  const auto bye = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (backend_->outstanding() != 0 && std::chrono::steady_clock::now() < bye) {
    steps.fetch_add(1, std::memory_order_relaxed);
    backend_->progress();
  }
}

// A lane after the first: hands its commands to its back-end and progresses it (which applies
// what the peers' same lane sends), until the proxy thread has carried every trigger.
void Proxy::runLane(Lane& lane) {
  NetBackend& b = *lane.backend;
  std::vector<Command> commands;
  uint32_t idle = 0;
  auto step = [&] {
    lane.steps.fetch_add(1, std::memory_order_relaxed);
    applyGone(lane);
    {
      std::lock_guard<std::mutex> lock(lane.mutex);
      commands.swap(lane.incoming);
    }
    for (Command& c : commands) {
      if (c.kind == kMsgBatch)
        b.batch(c.peer, std::move(c.parts), c.seq);
      else
        b.message(c.peer, c.kind, c.offset, c.value, c.seq);
    }
    const bool took = !commands.empty();
    // In flight first, then no longer queued: load() never reads low while a command moves.
    lane.inFlight.store(b.outstanding(), std::memory_order_relaxed);
    lane.queued.fetch_sub(commands.size(), std::memory_order_relaxed);
    commands.clear();
    const bool moved = b.progress() || took;
    lane.inFlight.store(b.outstanding(), std::memory_order_relaxed);
    if (const auto f = b.fault(); f) noteFault(*f);
    return moved;
  };
  while (!lanesStop_.load(std::memory_order_acquire)) {
    if (step()) {
      idle = 0;
      continue;
    }
    ++idle;
    if (idle < 256) continue;
    if (idle < 1024 || b.outstanding() != 0)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(idle < 8192 ? 5 : 50));
  }
  // The proxy thread gave up its drain (abort, or its bound passed): what is left goes or not
  // within the same short patience.
  b.setPatience(0.2);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(drain_ ? 200 : 0);
  while (lane.load() != 0 && std::chrono::steady_clock::now() < until) step();
  b.sayGoodbye();
  const auto bye = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (b.outstanding() != 0 && std::chrono::steady_clock::now() < bye) {
    lane.steps.fetch_add(1, std::memory_order_relaxed);
    b.progress();
  }
}

}  // namespace weft::transport
