#include "registry.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "device/comm_device.hpp"

namespace weft::service {

namespace {

dev::HeapLayout layoutOf(const Attach& a) {
  dev::HeapLayout l;
  l.nranks = static_cast<uint32_t>(a.nranks);
  l.inboxSlots = a.inboxSlots;
  l.tileBytes = a.tileBytes;
  l.oneShotBytes = a.oneShotBytes;
  return l;
}

// Whether weftd makes the rank a staging segment: its engine runs in weftd (weftd's own user only)
// on the CPU backend; a GPU engine maps the inputs instead (mapMemory).
bool stagesFor(uint32_t uid, const Attach& a) {
  return a.engineInWeftd && uid == ::geteuid() && !a.deviceHeaps && a.stagingBytes > 0;
}

bool sameShape(const Attach& x, const Attach& y) {
  return x.nranks == y.nranks && x.heapBytes == y.heapBytes && x.queueDepth == y.queueDepth && x.workers == y.workers &&
         x.inboxSlots == y.inboxSlots && x.tileBytes == y.tileBytes && x.oneShotBytes == y.oneShotBytes &&
         x.timeoutNs == y.timeoutNs && x.stagingBytes == y.stagingBytes && x.engineInWeftd == y.engineInWeftd &&
         x.deviceHeaps == y.deviceHeaps && memcmp(x.gpus, y.gpus, sizeof x.gpus) == 0;
}

}  // namespace

CommRegistry::~CommRegistry() {
  for (auto& [key, c] : comms_)
    for (Rank& r : c.ranks) release(c, r, &dev::EngineControl::abort);
  // The reaper, destroyed after the map, joins every engine before its memory goes.
}

// The heap stays mapped while the communicator lives: the other ranks' engines here store into it.
void CommRegistry::release(Comm& c, Rank& r, ControlWord word, uint64_t ticket, bool heapFd) {
  Reaper::Job job;
  job.ticket = ticket;
  if (r.engine) {
    // The workers give up every wait on the word and leave; nothing else frees them. Until they
    // have, they may touch every rank's heap (through the bases), this rank's queue and staging.
    // The workers poll the heap's stop word, and the queue's only now and then (engine_device.hpp).
    r.engine->raise({word, &dev::EngineControl::stop});
    prim::atomicStore<prim::Order::kRelease>(&r.queue->header()->stop, 1u);
    std::shared_ptr<ServedEngine> engine(std::move(r.engine));
    job.join = [engine] { return engine->join(); };
    job.keep.push_back(engine);  // freed with the rest, by reclaim
    job.keep.push_back(c.bases);
    for (const Rank& p : c.ranks)
      if (p.heap) job.keep.push_back(p.heap);
    job.keep.push_back(std::shared_ptr<WorkQueue>(std::move(r.queue)));
    job.keep.push_back(std::make_shared<transport::ShmSegment>(std::move(r.staging)));
  }
  for (int* fd : {&r.heapFd, &r.queueFd, &r.stagingFd})
    if (*fd >= 0 && (heapFd || fd != &r.heapFd)) {
      ::close(*fd);
      *fd = -1;
    }
  r.queue.reset();
  r.staging.reset();
  if (job.join || job.ticket != 0) reaper_.retire(std::move(job));
}

std::vector<int> CommRegistry::attach(uint32_t uid, pid_t pid, const Attach& a, Attached* out) {
  const Key key{uid, a.commId};
  // What this attach would make: every rank's heap with the communicator's first rank, and the
  // rank's staging segment where weftd runs its engine (queues, a few pages each, are not
  // charged). decodeAttach bounds the sizes (62 ranks, 2^42-byte heaps), so the sum cannot wrap.
  const bool newComm = comms_.find(key) == comms_.end();
  const uint64_t addedBytes =
      (newComm ? static_cast<uint64_t>(a.nranks) * a.heapBytes : 0) + (stagesFor(uid, a) ? a.stagingBytes : 0);
  if (userBytes_ > 0 && heldBytes(uid) + addedBytes > userBytes_)
    throw Error(Code::kOutOfMemory, "attach: uid " + std::to_string(uid) + "'s communicators hold " +
                                        std::to_string(heldBytes(uid)) + " bytes of weftd's memory; " +
                                        std::to_string(addedBytes) + " more would pass its limit of " +
                                        std::to_string(userBytes_) + " (service_user_bytes)");
  // A job's heaps on GPUs are made where the attach says: only for weftd's own user, since another
  // user's job would choose any GPU of the node, its own or not.
  if (a.deviceHeaps && uid != ::geteuid())
    throw Error(Code::kInvalidUsage, "attach: weftd makes heaps on GPUs for its own user's jobs only (uid " +
                                         std::to_string(::geteuid()) + "); run the job embedded (service=off)");
  auto [it, fresh] = comms_.try_emplace(key);
  Comm& c = it->second;
  Rank* made = nullptr;  // this attach's rank, once it is known to be one nobody else holds
  try {
    if (fresh) {
      if (a.heapBytes <= layoutOf(a).controlBytes())
        throw Error(Code::kInvalidUsage, "attach: the heap is smaller than its control area");
      c.first = a;
      // Only weftd's own user's descriptors are followed by an engine in weftd: another user's
      // pointers would reach into weftd's address space (design-notes, "weftd").
      c.engineInWeftd = a.engineInWeftd && uid == ::geteuid();
      c.ranks.resize(static_cast<size_t>(a.nranks));
      c.bases = std::make_shared<std::vector<uint8_t*>>(static_cast<size_t>(a.nranks) + 1, nullptr);
      // Every rank's heap at once: a rank maps its peers' as soon as it attaches. The segments
      // are sparse until written.
      for (int r = 0; r < a.nranks; ++r) {
        c.ranks[r].heap =
            std::make_shared<ServedHeap>(a.deviceHeaps ? unpackPciId(a.gpus[r]) : std::string(), a.heapBytes,
                                         layoutOf(a).controlBytes(), "heap" + std::to_string(r), &c.ranks[r].heapFd);
        (*c.bases)[r] = c.ranks[r].heap->data();
      }
    }
    if (!sameShape(c.first, a))
      throw Error(Code::kInvalidUsage, "attach: rank " + std::to_string(a.rank) +
                                           " disagrees with its communicator's first rank on its size, heap, queue, "
                                           "engine or timeout");
    Rank& me = c.ranks[a.rank];
    if (me.state != RankState::kNever)
      throw Error(Code::kInvalidUsage, "attach: rank " + std::to_string(a.rank) + " of communicator " +
                                           std::to_string(a.commId) + " has attached before");
    made = &me;
    int queueFd = -1;
    auto queue = transport::ShmSegment::createAnonymous("queue" + std::to_string(a.rank),
                                                        WorkQueue::bytesFor(a.queueDepth), &queueFd);
    me.queueFd = queueFd;
    me.queue = std::make_unique<WorkQueue>(a.queueDepth, std::move(queue));
    if (stagesFor(uid, a))
      me.staging =
          transport::ShmSegment::createAnonymous("staging" + std::to_string(a.rank), a.stagingBytes, &me.stagingFd);
    me.state = RankState::kAttached;
    me.pid = pid;
    if (c.lostRank >= 0) failRank(c, a.rank);
    if (c.engineInWeftd) startEngine(c, a.rank);
  } catch (...) {
    if (fresh) {
      for (Rank& r : c.ranks) release(c, r, &dev::EngineControl::abort);
      comms_.erase(it);
    } else if (made) {
      // Undo only what this attach made: the communicator's heap (and its descriptor) stays, for the
      // ranks that attached and those still to come.
      release(c, *made, &dev::EngineControl::abort, 0, /*heapFd=*/false);
      made->state = RankState::kNever;
    }
    throw;
  }
  const Rank& me = c.ranks[a.rank];
  *out = Attached{a.commId,
                  a.rank,
                  a.nranks,
                  c.engineInWeftd ? (a.deviceHeaps ? 2u : 1u) : 0u,
                  c.engineInWeftd ? static_cast<uint32_t>(workersFor(c)) : 0u,
                  reinterpret_cast<uint64_t>(me.heap->data()),
                  reinterpret_cast<uint64_t>(me.staging.data())};
  std::vector<int> fds{me.heapFd, me.queueFd};
  if (stagesFor(uid, a)) fds.push_back(me.stagingFd);
  for (int r = 0; r < a.nranks; ++r)
    if (r != a.rank) fds.push_back(c.ranks[r].heapFd);
  WEFT_LOG(kInfo, kService, "rank {}/{} of communicator {:016x} (uid {}, pid {}) attached; engine in {}", a.rank,
           a.nranks, a.commId, uid, pid,
           c.engineInWeftd ? "weftd, workers: " + std::to_string(workersFor(c)) : std::string("the rank"));
  return fds;
}

int CommRegistry::workersFor(const Comm& c) const {
  return std::min(static_cast<int>(c.first.workers), engineWorkers_);
}

void CommRegistry::startEngine(Comm& c, int r) {
  Rank& me = c.ranks[r];
  dev::CommView v;
  v.rank = r;
  v.nranks = c.first.nranks;
  v.heap = c.bases->data();
  v.layout = layoutOf(c.first);
  v.queue = me.queue->header();
  v.slots = me.queue->slots();
  v.alive = me.queue->alive();
  v.control = reinterpret_cast<dev::EngineControl*>(me.heap->data());
  v.timeoutNs = c.first.timeoutNs;
  // On a GPU the ranks of the communicator that share the rank's GPU split its blocks.
  int sharers = 0;
  for (int p = 0; p < v.nranks; ++p) sharers += c.first.gpus[p] == c.first.gpus[r];
  me.engine =
      std::make_unique<ServedEngine>(v, *me.queue, workersFor(c), engineIdleNs_,
                                     c.first.deviceHeaps ? unpackPciId(c.first.gpus[r]) : std::string(), sharers);
}

ServedEngine* CommRegistry::engineOf(uint32_t uid, uint64_t commId, int rank) const {
  auto it = comms_.find(Key{uid, commId});
  if (it == comms_.end() || it->second.ranks[rank].state != RankState::kAttached) return nullptr;
  return it->second.ranks[rank].engine.get();
}

void CommRegistry::wake(uint32_t uid, uint64_t commId, int rank) {
  ServedEngine* e = engineOf(uid, commId, rank);
  if (!e) throw Error(Code::kInvalidUsage, "wake: weftd runs no engine for this rank");
  e->wake();
}

void CommRegistry::reclaim() {
  for (auto& held : reaper_.takeJoined()) graveyard_.push_back(std::move(held));
  // An engine still stopping runs its kernel; one that never stopped runs it for good.
  if (reaper_.pending() > 0 || reaper_.stuck() > 0) return;
  // A close waits for the kernels of its GPU only (a context is one GPU's): a rank's mappings go
  // once its GPU is free of weftd's kernels, even while a peer's kernel on another GPU waits for
  // that rank's next op. The graveyard, which holds every GPU's memory, waits for all of them.
  std::vector<int> busy;
  for (auto& [key, c] : comms_)
    for (Rank& r : c.ranks)
      if (r.engine && r.engine->running()) busy.push_back(r.engine->device());
  for (auto& [key, c] : comms_)
    for (Rank& r : c.ranks)
      if (r.engine && r.engine->holdsRetired() && std::find(busy.begin(), busy.end(), r.engine->device()) == busy.end())
        r.engine->closeRetired();
  if (!busy.empty()) return;
  // In the order handed over: each stopped engine before the queue and heaps it ran over.
  for (auto& held : graveyard_) held.reset();
  graveyard_.clear();
}

uint64_t CommRegistry::mapMemory(uint32_t uid, uint64_t commId, int rank, const MapMemory& m, bool mayDefer) {
  ServedEngine* e = engineOf(uid, commId, rank);
  if (!e) throw Error(Code::kInvalidUsage, "map memory: weftd runs no engine for this rank");
  return e->mapInput(m.handle, m.base, m.bytes, mayDefer);
}

bool CommRegistry::retiring(uint32_t uid, uint64_t commId, int rank) const {
  const ServedEngine* e = engineOf(uid, commId, rank);
  return e && e->holdsRetired();
}

void CommRegistry::detach(uint32_t uid, uint64_t commId, int rank, uint64_t ticket) {
  const Key key{uid, commId};
  auto it = comms_.find(key);
  if (it == comms_.end()) {
    reaper_.retire(Reaper::Job{nullptr, {}, ticket});
    return;
  }
  Rank& r = it->second.ranks[rank];
  r.state = RankState::kGone;
  release(it->second, r, &dev::EngineControl::stop, ticket);
  WEFT_LOG(kInfo, kService, "rank {} of communicator {:016x} detached", rank, commId);
  dropIfIdle(key);
}

void CommRegistry::lost(uint32_t uid, uint64_t commId, int rank) {
  const Key key{uid, commId};
  auto it = comms_.find(key);
  if (it == comms_.end()) return;
  Comm& c = it->second;
  if (c.lostRank < 0) {
    c.lostRank = rank;
    c.lostPid = c.ranks[rank].pid;
    WEFT_LOG(kWarn, kService, "rank {} (pid {}) of communicator {:016x} went without detaching: failing its peers",
             rank, c.lostPid, commId);
    for (int r = 0; r < static_cast<int>(c.ranks.size()); ++r)
      if (r != rank && c.ranks[r].state == RankState::kAttached) failRank(c, r);
  }
  c.ranks[rank].state = RankState::kGone;
  release(c, c.ranks[rank], &dev::EngineControl::abort);
  dropIfIdle(key);
}

void CommRegistry::failRank(Comm& c, int r) {
  // The same record a failing wait writes, in the rank's queue header, where its host waits and
  // weft_comm_get_async_error look; then the engine's own word, where its waits look (on a GPU
  // that is device memory, which only a copy reaches).
  dev::recordHostFailure(*c.ranks[r].queue->header(), dev::WaitSite{0, 0, c.lostRank, dev::WaitWhat::kPeerGone},
                         dev::Status::kTransport, 0, static_cast<uint64_t>(c.lostPid));
  c.ranks[r].heap->failEngine(static_cast<uint32_t>(dev::Status::kTransport));
}

void CommRegistry::checkEngines() {
  for (auto& [key, c] : comms_) {
    if (!c.engineInWeftd || c.engineFailed) continue;
    for (int r = 0; r < static_cast<int>(c.ranks.size()) && !c.engineFailed; ++r) {
      if (!c.ranks[r].engine) continue;
      const std::string fault = c.ranks[r].engine->fault();
      if (fault.empty()) continue;
      c.engineFailed = true;
      WEFT_LOG(kError, kService, "communicator {:016x}: weftd's engine of rank {} failed: {}; failing every rank's ops",
               key.second, r, fault);
      // The record goes where each rank's host waits and weft_comm_get_async_error look. A rank
      // whose kernel still runs (on another GPU) is aborted: it fails its op and completes its
      // slots itself. A rank whose kernel has gone has its slots completed here, which releases
      // the streams that wait on their done words.
      for (Rank& p : c.ranks) {
        if (!p.queue) continue;
        dev::recordHostFailure(*p.queue->header(), dev::WaitSite{0, 0, kWeftdEngineFailed, dev::WaitWhat::kPeerGone},
                               dev::Status::kTransport, 0, static_cast<uint64_t>(::getpid()));
        prim::atomicStore<prim::Order::kRelease>(&p.queue->header()->abort, 1u);
        if (p.engine && p.engine->fault().empty()) {
          p.engine->raise({&dev::EngineControl::abort});
        } else {
          p.queue->completeAborted();
        }
      }
    }
  }
}

void CommRegistry::dropIfIdle(const Key& k) {
  auto it = comms_.find(k);
  for (const Rank& r : it->second.ranks)
    if (r.state == RankState::kAttached) return;
  for (Rank& r : it->second.ranks) release(it->second, r, &dev::EngineControl::stop);
  for (Rank& r : it->second.ranks) r.heap.reset();
  WEFT_LOG(kInfo, kService, "communicator {:016x}: no rank attached, its memory released", k.second);
  comms_.erase(it);
}

uint64_t CommRegistry::bytesOf(const Comm& c) {
  uint64_t total = 0;
  for (const Rank& r : c.ranks)
    total += (r.heap ? r.heap->size() : 0) + r.staging.size() + (r.queue ? r.queue->bytes() : 0);
  return total;
}

uint64_t CommRegistry::heldBytes() const {
  uint64_t total = 0;
  for (const auto& [k, c] : comms_) total += bytesOf(c);
  return total;
}

uint64_t CommRegistry::heldBytes(uint32_t uid) const {
  uint64_t total = 0;
  for (const auto& [k, c] : comms_)
    if (k.first == uid) total += bytesOf(c);
  return total;
}

}  // namespace weft::service
