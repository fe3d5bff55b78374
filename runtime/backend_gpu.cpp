// GPU backends (CUDA, HIP), the engine: an op runs as its own kernel on the caller's stream
// (launched engine, the default), or through the persistent kernel polling the queue in pinned host
// memory, reached in stream order by a stream write of the slot's `ready` word and a stream wait on
// its `done` word. Under graph capture both engines capture the op kernel.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "backend.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/undo.hpp"
#include "device/blas_host.hpp"
#include "device/gpu_host.hpp"
#include "device/ops/collectives/allreduce_oneshot_device.hpp"
#include "device/ops/gemm/gemm_alltoall_device.hpp"
#include "handover_guard.hpp"
#include "transport/p2p/gpu_require.hpp"

namespace weft {

using transport::requireGpu;

namespace {

bool gemvKind(dev::OpKind kind) { return kind == dev::OpKind::kGemv || kind == dev::OpKind::kGemvAllReduce; }

// Per device, how many kernels this process's engines may have resident at once: one for a
// launched engine (its ops are ordered), two for a persistent one (its kernel, and an op that runs
// as a kernel of its own beside it). Where ranks share a device, each rank's kernels together must
// fit its share, so each engine's grids take share / this many blocks (Impl::spread).
// Never destroyed: a communicator may be destroyed at process exit, after other statics.
struct ResidentKernels {
  std::mutex mutex;
  std::map<int, int> perDevice;
};
ResidentKernels& residentKernelsState() {
  static auto* state = new ResidentKernels;
  return *state;
}

void addResidentKernels(int device, int kernels) {
  ResidentKernels& r = residentKernelsState();
  std::lock_guard<std::mutex> lock(r.mutex);
  if ((r.perDevice[device] += kernels) <= 0) r.perDevice.erase(device);
}

int residentKernels(int device) {
  ResidentKernels& r = residentKernelsState();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.perDevice.find(device);
  return it == r.perDevice.end() ? 1 : std::max(1, it->second);
}

}  // namespace

// Device memory that an op reads and a later one may need larger: grown to at least twice its
// size (in 2 MiB steps), so that a rising size keeps few outgrown buffers, each kept until the
// engine stops (a captured graph may still address it).
struct GrowingBuffer {
  void* at = nullptr;
  uint64_t bytes = 0;
  std::vector<void*> outgrown;

  void* atLeast(uint64_t need, const char* what) {
    if (need <= bytes) return at;
    const uint64_t grown = dev::ceilDiv(std::max(need, 2 * bytes), uint64_t{2} << 20) * (uint64_t{2} << 20);
    void* p = nullptr;
    requireGpu(gpu::deviceMallocDuringCapture(&p, grown), what);
    if (at) outgrown.push_back(at);
    at = p;
    bytes = grown;
    return at;
  }
  void release() {
    for (void* p : outgrown) gpu::deviceFree(p);
    if (at) gpu::deviceFree(at);
    outgrown.clear();
    at = nullptr;
    bytes = 0;
  }
};

struct Engine::Impl {
  WorkQueue* queue = nullptr;
  uint8_t* queueDevice = nullptr;  // the queue's shared memory as the GPU addresses it
  dev::CommView view;              // with device addresses
  bool persistent = false;
  bool inProcess = false;  // the persistent kernel is this process's, for its own ranks (not weftd's)
  bool remote = false;     // "weftd": the persistent kernel is weftd's (service mode); none runs here
  bool proxied = false;    // the kernels that post to the host proxy
  void* stream = nullptr;  // persistent: the engine's own stream
  void* lastOp = nullptr;  // event after the latest op kernel on a caller's stream (launched ops, or a
                           // persistent engine's GEMM op), to order ops across streams
  void* lastStream = nullptr;
  void* controlStream = nullptr;  // for setting control words, behind nobody's work
  int device = 0;
  int workers = 0;
  int threads = prim::kBlockThreads;
  int gatherBlocks = 0;  // launched: resident blocks of the embedding kernel
  // Launched: the same before any share of the device is taken, for the embedding's pooling kernel,
  // which waits on nothing: a block that is not resident waits only for this kernel's own blocks,
  // which finish, so it may take what the process holds, as a framework's kernel would.
  int poolBlocks = 0;
  int gemvBlocks = 0;     // launched: resident blocks of the GEMV kernel
  int oneShotBlocks = 0;  // launched: resident blocks of the one-shot kernels
  int gemmBlocks = 0;     // resident blocks of the GEMM kernel
  int sharers = 1;        // ranks of the job on this device (each gets 1/sharers)
  int kernels = 0;        // this engine's count in residentKernels (until stop); 0: weftd's
  bool stopped = false;   // stop() ran
  bool released = false;  // and the device no longer uses the communicator's memory
  int share(int resident) const { return std::max(1, resident / sharers); }
  // A grid of this rank's share (`blocks`), where ranks share the device: its part of the share,
  // beside the other kernels this process may hold resident there (residentKernels). Only grids:
  // what an op's descriptor holds must be the same on every rank, whatever its communicators.
  int spread(int blocks) const {
    return sharers > 1 && kernels > 0 ? std::max(1, blocks / residentKernels(device)) : blocks;
  }
  float* gemmPartials = nullptr;          // the GEMM's split tiles' partials (sm_90a), gemmBlocks slots
  std::unique_ptr<gpu::VendorBlas> blas;  // launched engines of builds with one: the `blas` paths
  GrowingBuffer product;  // the GEMM + All-to-All's blas path: the vendor BLAS's product, the op's input
  GrowingBuffer pooled;   // the embedding's unfused path: its pooled vectors (poolEmbedding)
  std::mutex launchMutex;
  std::function<void()> wake;  // remote: asks weftd to start its kernel again (setWake)
  // The in-process persistent engine: fails an op its kernel never starts (handover_guard.hpp).
  std::unique_ptr<HandoverGuard> guard;
  // Engine::itemsFinished's copies: a stream and a pinned word of their own (made on first use,
  // on the status watch's thread).
  void* watchStream = nullptr;
  uint64_t* watchWord = nullptr;

  template <typename T>
  T* onDevice(T* host) const {
    return reinterpret_cast<T*>(queueDevice +
                                (reinterpret_cast<uint8_t*>(host) - static_cast<uint8_t*>(queue->memory())));
  }

  // The submitter's half of the idle-exit handshake (device/engine_device.hpp): the caller has
  // taken its ticket (raised `tail`); if no worker is alive after a full fence, none will serve
  // it, so start the kernel again. Kernels on the one engine stream run one after another.
  // weftd's kernel (remote) is started again by weftd, which the rank asks (wake).
  gpu::Outcome ensureRunning() {
    if (remote && !wake) return {};
    std::lock_guard<std::mutex> lock(launchMutex);
    prim::fenceSeqCst();
    uint32_t* alive = queue->alive();
    for (int w = 0; w < workers; ++w)
      if (prim::atomicLoad<prim::Order::kAcquire>(&alive[w])) return {};
    // A stopped engine (destroy, or the handover guard) starts no kernel: one started now could
    // take an op the host is completing, or queue behind a stream the guard released.
    if (!remote && prim::atomicLoad<prim::Order::kAcquire>(&queue->header()->stop) != 0) return {};
    if (!remote) return launch();
    try {
      wake();
    } catch (const Error& err) {
      return gpu::Outcome{gpu::Fault::kOther, std::string("asking weftd to start its engine again: ") + err.what()};
    }
    return {};
  }

  gpu::Outcome launch() {
    uint32_t* alive = queue->alive();
    const int grid = spread(workers);
    for (int w = 0; w < grid; ++w) prim::atomicStore<prim::Order::kRelease>(&alive[w], 1u);
    const uint64_t first = prim::atomicLoad<prim::Order::kAcquire>(&queue->header()->completed);
    return gpu::launchPersistent(view, grid, threads, stream, first, proxied);
  }

  // The control words are in device memory: copies from a host word that holds 1, on a stream of
  // their own, so that they never wait behind the caller's work. With a host proxy they are in the
  // host heap, which the kernels read over PCIe: stores, which no stream work can hold up (the
  // proxy's fault handler raises from its thread). `drainS` bounds the wait for the copies to land;
  // 0: queue them and return (the handover guard's: its kernel may hold the control stream, and the
  // copies land once it has left).
  void raise(std::initializer_list<ControlWord> words, double drainS = 1.0) {
    if (proxied) {
      for (ControlWord w : words) prim::atomicStore<prim::Order::kRelease>(&(view.control->*w), 1u);
      return;
    }
    std::lock_guard<std::mutex> lock(launchMutex);
    gpu::Outcome o;
    for (ControlWord w : words)
      if (o) o = gpu::copyToDeviceAsync(&(view.control->*w), onDevice(queue->one()), sizeof(uint32_t), controlStream);
    if (o && drainS > 0) o = gpu::streamDrain(controlStream, drainS);
    if (!o && o.fault != gpu::Fault::kShuttingDown)
      WEFT_LOG(kError, kEngine, "could not set a control word of the engine: {}", o.message);
  }

  // An op that could not be handed over leaves every peer's counters ahead of this rank's: the
  // communicator has failed (sticky), like after a timeout. The host refuses later ops; the
  // engine's workers read their own error word (stopReason), so ops already in the queue, this
  // one included once it is marked ready, fail at once too.
  void failed(uint64_t ticket) {
    queue->recordHostFailure(ticket, dev::Status::kAborted, ticket + 1, 0);
    raise({&dev::EngineControl::error});
  }

  // Persistent: the published slot reaches the engine when the stream writes `ready`; the stream
  // then waits for `done`.
  gpu::Outcome enqueuePersistent(uint64_t ticket, const dev::OpDesc& desc, void* userStream, uint64_t timeoutNs,
                                 dev::Status* st) {
    // An op the engine runs must not overlap a GEMM kernel launched before it on another stream.
    gpu::Outcome ordered;
    if (lastStream && lastStream != userStream) ordered = gpu::streamWaitEvent(userStream, lastOp);
    if (!ordered) return ordered;
    *st = queue->publish(ticket, desc, /*hostWaits=*/false, timeoutNs);
    if (*st != dev::Status::kOk) return {};
    // The descriptor was written with plain stores; the stream's write of `ready` must follow them.
    std::atomic_thread_fence(std::memory_order_release);
    gpu::Outcome o = ensureRunning();
    if (o) o = gpu::streamWriteValue(userStream, onDevice(queue->readyWord(ticket)), ticket + 1);
    if (o) o = gpu::streamWaitAtLeast(userStream, onDevice(queue->doneWord(ticket)), ticket + 1);
    // weftd's engine: a rank whose weftd has gone completes the unfinished slots itself (the
    // watcher in Comm::create); an op published after that is completed here, so that its
    // stream's wait ends.
    if (o && remote) queue->completeIfAborted();
    if (!o) {
      failed(ticket);
      // The slot is published: let the engine drain it (the op fails at once) rather than wait forever.
      queue->markReady(ticket);
    }
    return o;
  }

  // `workers` blocks per op, but the ops whose speed is the loads in flight on every block the
  // device holds at once: the embedding op (its only cross-block waits are on blocks that never
  // wait: the peers' item 0 and this rank's data items, so a grid larger than resident is safe),
  // the GEMV (see launchSized), and the one-shot AllReduce, up to its items and what is resident (its
  // items wait only on the peers' items of the same index, never on another block of this rank).
  // The GEMM op is always a kernel of its own.
  // Where ranks share the device, no grid may exceed its kernel's share: a block that is not
  // resident waits for a free slot, which the peers' spinning blocks never give back, and those
  // blocks wait on it.
  int groupsFor(dev::OpKind kind) const {
    if (kind == dev::OpKind::kGemmAllToAll) return gemmBlocks;
    if (remote && gemvKind(kind)) return gemvBlocks;  // a kernel of the rank's (runsAlone)
    if (persistent) return workers;
    const bool shared = sharers > 1;
    const int oneShot = std::min(oneShotBlocks, static_cast<int>(dev::AllReduceOneShotOp::kMaxItems));
    switch (kind) {
      case dev::OpKind::kEmbeddingAllToAll:
        return shared ? gatherBlocks : std::max(workers, gatherBlocks);
      case dev::OpKind::kEmbeddingPool:
        return poolBlocks;
      case dev::OpKind::kGemv:
      case dev::OpKind::kGemvAllReduce:
        return shared ? gemvBlocks : std::max(workers, gemvBlocks);
      case dev::OpKind::kAllReduceOneShot:
        return shared ? oneShot : std::max(workers, oneShot);
      default:
        return workers;
    }
  }

  // The op as its kernel runs it: the GEMM's split is the grid's (gemmBlocks), so a split op has
  // more items than blocks and the kernel runs on exactly that grid.
  dev::OpDesc asLaunched(const dev::OpDesc& desc) const {
    dev::OpDesc d = desc;
    if (static_cast<dev::OpKind>(desc.kind) == dev::OpKind::kGemmAllToAll && gemmPartials)
      dev::GemmAllToAllOp::splitLastWave(d, static_cast<uint32_t>(gemmBlocks), gemmPartials);
    return d;
  }

  // Sizes the op's grid (its items, at most what runs at once), then launches it (gpu::launchOp).
  gpu::Outcome launchSized(const dev::OpDesc& desc, void* stream) {
    const auto kind = static_cast<dev::OpKind>(desc.kind);
    // The GEMV: a block per compute item, which then reduces the same slices, so that no block
    // waits on another block of this rank, resident or not.
    // The GEMV's items are in the descriptor, which every rank must cut alike, and the GEMM's grid
    // places its split partials' flags (gemmBlocks, fixed at init): neither is spread here.
    const bool gemv = gemvKind(kind);
    const bool gemm = kind == dev::OpKind::kGemmAllToAll;
    // The pooling kernel waits on nothing: not spread among the process's kernels either.
    const bool pool = kind == dev::OpKind::kEmbeddingPool;
    const int grid = gemv   ? static_cast<int>(desc.grain)
                     : gemm ? gemmBlocks
                     : pool ? groupsFor(kind)
                            : spread(groupsFor(kind));
    const dev::OpDesc d = asLaunched(desc);
    const int blocks = static_cast<int>(std::min<uint64_t>(d.nitems, static_cast<uint64_t>(grid)));
    return gpu::launchOp(view, d, blocks, threads, stream, proxied);
  }

  // Persistent engine, an op that runs alone (runsAlone: the GEMM, and the GEMV under weftd's):
  // its own kernel.
  // A one-item marker op takes its ticket, so the stream starts the kernel once the engine has
  // finished every op before it; the event after the kernel holds back the next op the engine
  // would take from another stream.
  gpu::Outcome enqueueAlone(uint64_t ticket, const dev::OpDesc& desc, void* userStream, uint64_t timeoutNs,
                            dev::Status* st) {
    dev::OpDesc marker{};
    marker.kind = static_cast<uint32_t>(dev::OpKind::kNop);
    marker.nitems = 1;
    gpu::Outcome o = enqueuePersistent(ticket, marker, userStream, timeoutNs, st);
    if (!o || *st != dev::Status::kOk) return o;
    o = launchSized(desc, userStream);
    if (o) o = gpu::eventRecord(lastOp, userStream);
    if (o) lastStream = userStream;
    if (!o) failed(ticket);
    return o;
  }

  // Launched: one kernel per op. Ops of one communicator must not overlap (they share the signal
  // counters), so an op on another stream than the previous one first waits for that one.
  // An eager op counts its items for the status watch (Engine::itemsFinished).
  gpu::Outcome enqueueLaunched(uint64_t ticket, const dev::OpDesc& desc, void* userStream) {
    gpu::Outcome o;
    if (lastStream && lastStream != userStream) o = gpu::streamWaitEvent(userStream, lastOp);
    dev::OpDesc counted = desc;
    counted.countItems = 1;
    if (o) o = launchSized(counted, userStream);
    if (o) o = gpu::eventRecord(lastOp, userStream);
    if (o) lastStream = userStream;
    if (!o) failed(ticket);
    // The caller's stream owns the op from here: nothing for finalize to wait for.
    prim::atomicStore<prim::Order::kRelease>(&queue->header()->completed, ticket + 1);
    return o;
  }
};

namespace {

// Ranks sharing a GPU under MPS wait on each other's spinning kernels: measured on an H200, without
// a per-process SM share the persistent engines and the fused GEMV of two sharers did not run side
// by side and their ops timed out, while with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / sharers
// every op passed. The variable is read when CUDA starts in the process, before weft can set it.
void warnWithoutMpsShare(int sharers) {
  const char* share = std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
  const int most = 100 / sharers;
  if (share && std::atof(share) > 0 && std::atof(share) <= most) return;
  WEFT_LOG(kWarn, kEngine,
           "{} ranks share this GPU but CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is {}: set it to at most {} in every "
           "rank's environment (before CUDA starts), or their kernels may wait on each other until the timeout",
           sharers, share ? share : "unset", most);
}

// Under MPS a kernel's first launch in one rank (lazy module loading, CUDA's default) waits for the
// whole device's work to drain, the other ranks' kernels included, and those may be waiting on this
// rank's op: every rank stalls until the timeout. weft loads its own kernels at init; the others
// (the vendor BLAS's, the framework's) load at their first launch unless loading is eager. Read
// when CUDA starts in the process, before weft can set it.
void warnWithoutEagerLoading(int sharers) {
  const char* loading = std::getenv("CUDA_MODULE_LOADING");
  if (loading && std::string(loading) == "EAGER") return;
  WEFT_LOG(kWarn, kEngine,
           "{} ranks share this GPU but CUDA_MODULE_LOADING is {}: set it to EAGER in every rank's environment "
           "(before CUDA starts), or a kernel's first launch in one rank may wait for another rank's spinning "
           "kernel until the timeout",
           sharers, loading ? loading : "unset (lazy)");
}

// The in-process persistent kernel stays on its stream's hardware queue: a caller's stream that
// shares it cannot hand the kernel an op (docs/design-notes.md, "The persistent engine and the
// GPU's hardware queues"). The fewer queues, the likelier; read when CUDA starts in the process.
void warnWithFewHardwareQueues() {
  const char* queues = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (queues && std::atoi(queues) >= 32) return;
  static std::once_flag once;  // the variable is the process's: once for all its communicators
  std::call_once(once, [&] {
    WEFT_LOG(kWarn, kEngine,
             "engine=persistent with CUDA_DEVICE_MAX_CONNECTIONS {}: a stream of this process that shares the GPU's "
             "hardware queue with the resident kernel cannot hand it an op, which then fails after "
             "engine_handover_s; set it to 32 before CUDA starts, or use engine=launched",
             queues ? queues : "unset (8)");
  });
}

}  // namespace

Engine::Engine(const dev::CommView& view, WorkQueue& queue, int workers, const std::string& mode, int deviceSharers,
               bool proxied)
    : impl_(std::make_unique<Impl>()) {
  Impl& e = *impl_;
  e.proxied = proxied;
  e.queue = &queue;
  e.workers = workers;
  e.sharers = std::max(1, deviceSharers);
  // "weftd": the queue is served by weftd's persistent kernel (service mode); this engine only
  // submits, and runs the ops that are kernels of the caller's (the GEMM, captured ops).
  e.remote = mode == "weftd";
  const bool served = mode == "served";
  e.inProcess = mode == "persistent";
  if (e.inProcess) warnWithFewHardwareQueues();
  e.persistent = e.inProcess || served || e.remote;
  if (workers > static_cast<int>(WorkQueue::kMaxWorkers))
    throw Error(Code::kInvalidArgument, "persistent_ctas: at most " + std::to_string(WorkQueue::kMaxWorkers));
  requireGpu(gpu::currentDevice(&e.device), "finding the current device");
  // weftd's engines serve the ranks of other processes, each already given its rank's share.
  e.kernels = served ? 0 : e.persistent && !e.remote ? 2 : 1;
  addResidentKernels(e.device, e.kernels);
  Undo uncount{[&] { addResidentKernels(e.device, -e.kernels); }};
  void* mapped = nullptr;
  requireGpu(gpu::hostRegister(queue.memory(), queue.bytes(), &mapped), "mapping the work queue into the GPU");
  Undo unregister{[&] { gpu::hostUnregister(queue.memory()); }};
  e.queueDevice = static_cast<uint8_t*>(mapped);
  e.view = view;
  e.view.queue = e.onDevice(queue.header());
  e.view.slots = e.onDevice(queue.slots());
  e.view.alive = e.onDevice(queue.alive());
  requireGpu(gpu::streamCreateNonBlocking(&e.controlStream), "creating the control stream");
  requireGpu(gpu::loadKernels(e.proxied), "loading weft's kernels");
  requireGpu(gpu::residentOpBlocks(dev::OpKind::kGemmAllToAll, e.threads, e.proxied, &e.gemmBlocks),
             "sizing the GEMM kernel's grid");
  // Under weftd's engine, weftd's persistent kernels (one per rank on this GPU, a block per SM
  // for each worker) hold SMs while they run: the ops that run as the rank's own kernels (the
  // GEMM, the GEMV) take the grid the other SMs hold, or their last blocks would wait for a
  // second wave (the GEMM) or stream w with fewer loads in flight than the grid assumes.
  int sms = 1, freeSms = 1;
  if (e.remote) {
    requireGpu(gpu::smCount(&sms), "counting the GPU's multiprocessors");
    sms = std::max(1, sms);
    freeSms = std::max(sms / 4, sms - e.sharers * e.workers);
  }
  const auto besideWeftd = [&](int blocks) { return e.remote ? std::max(1, blocks / sms * freeSms) : blocks; };
  // Spread once, here: the split's partials place their flags by the grid, so the GEMM's grid may
  // not change over the engine's life (communicators made later do not narrow it).
  e.gemmBlocks = e.spread(e.share(besideWeftd(e.gemmBlocks)));
  if (e.sharers > 1) {
    // Every op kernel's blocks may wait on a peer's: the sharers' kernels must all be resident at
    // once, so each takes its share of what the device holds (the generic op kernel's, for workers).
    int resident = 0;
    if (e.persistent)
      requireGpu(gpu::residentPersistentBlocks(e.threads, e.proxied, &resident), "sizing the persistent kernel's grid");
    else
      requireGpu(gpu::residentOpBlocks(dev::OpKind::kAllReduce, e.threads, e.proxied, &resident),
                 "sizing the op kernel's grid");
    e.workers = std::max(1, std::min(e.workers, e.share(resident)));
    WEFT_LOG(kInfo, kEngine,
             "{} ranks of this job use this GPU: each op kernel takes at most 1/{} of its blocks ({} workers), "
             "split among the kernels this process's communicators may hold on it at once; their kernels run "
             "side by side only under MPS (nvidia-cuda-mps-control -d)",
             e.sharers, e.sharers, e.workers);
    warnWithoutMpsShare(e.sharers);
    warnWithoutEagerLoading(e.sharers);
  }
  Undo freePartials{[&] {
    if (e.gemmPartials) gpu::deviceFree(e.gemmPartials);
  }};
  if (gpu::gemmSplitsLastWave()) {
    // Zeroed once: a slot's flag only ever rises (it carries the epoch of the op that wrote it).
    const uint64_t bytes = dev::GemmAllToAllOp::partialsBytes(static_cast<uint32_t>(e.gemmBlocks));
    void* p = nullptr;
    requireGpu(gpu::deviceMalloc(&p, bytes), "the GEMM's partials buffer");
    e.gemmPartials = static_cast<float*>(p);
    requireGpu(gpu::zeroDeviceNow(p, bytes, e.controlStream, 10.0), "zeroing the GEMM's partials buffer");
  }
  requireGpu(gpu::eventCreate(&e.lastOp), "creating the op-order event");
  if (e.persistent && !e.remote) {
    requireGpu(gpu::streamCreateNonBlocking(&e.stream), "creating the engine's stream");
    Undo destroyStream{[&] { gpu::streamDestroy(e.stream); }};
    requireGpu(e.launch(), "starting the persistent kernel");
    destroyStream.armed = false;
  } else {
    requireGpu(gpu::residentOpBlocks(dev::OpKind::kEmbeddingAllToAll, e.threads, e.proxied, &e.gatherBlocks),
               "sizing the embedding kernel's grid");
    requireGpu(gpu::residentOpBlocks(dev::OpKind::kGemv, e.threads, e.proxied, &e.gemvBlocks),
               "sizing the GEMV kernel's grid");
    requireGpu(gpu::residentOpBlocks(dev::OpKind::kAllReduceOneShot, e.threads, e.proxied, &e.oneShotBlocks),
               "sizing the one-shot AllReduce's grid");
    if (e.sharers > 1) {
      // That is the 128-byte lines' kernel; the 8-byte words run in the op kernel, which may hold
      // fewer blocks, and a shared device must hold the whole grid of whichever runs.
      int words = 0;
      requireGpu(gpu::residentOpBlocks(dev::OpKind::kAllReduce, e.threads, e.proxied, &words),
                 "sizing the one-shot AllReduce's grid");
      e.oneShotBlocks = std::min(e.oneShotBlocks, words);
    }
    // Through weftd's engine the GEMV runs as the rank's own kernel, as the GEMM does: weftd's 32
    // workers streamed w at a fifth of the rate the whole GPU does.
    e.poolBlocks = e.gatherBlocks;
    e.gatherBlocks = e.share(e.gatherBlocks);
    e.gemvBlocks = e.share(besideWeftd(e.gemvBlocks));
    e.oneShotBlocks = e.share(e.oneShotBlocks);
    // Without it the `blas` path runs weft's GEMV: slower where the table chose it, still correct.
    if (gpu::VendorBlas::built())
      if (const gpu::Outcome o = gpu::VendorBlas::create(&e.blas); !o)
        WEFT_LOG(kWarn, kEngine, "no vendor BLAS for the GEMV + AllReduce's blas path: {}", o.message);
  }
  unregister.armed = false;
  freePartials.armed = false;
  uncount.armed = false;
}

bool Engine::stop() {
  Impl& e = *impl_;
  if (e.stopped) return e.released;
  e.stopped = true;
  e.guard.reset();
  addResidentKernels(e.device, -e.kernels);
  if (e.remote) {
    // weftd's kernel has stopped once the rank's detach returned (Comm::~Comm).
    e.queue->completeUnfinished();
  } else if (e.persistent) {
    // The caller set `stop`; every wait in the kernel checks it, so it exits within milliseconds.
    gpu::Outcome o = gpu::streamDrain(e.stream, 10.0);
    // At process exit the runtime may be gone before this communicator: nothing is left to free.
    if (o.fault == gpu::Fault::kShuttingDown) return e.released = true;
    if (!o) {
      WEFT_LOG(kError, kEngine, "persistent kernel did not stop: {}; leaking the communicator's memory", o.message);
      return e.released = false;
    }
    e.queue->completeUnfinished();
    gpu::streamDestroy(e.stream);
  }
  // Op kernels still running on the caller's streams read the queue's pinned memory.
  if (!quiesce(10.0)) {
    WEFT_LOG(kError, kEngine,
             "ops still running on the caller's streams at destroy; leaking the communicator's memory");
    return e.released = false;
  }
  gpu::eventDestroy(e.lastOp);
  gpu::streamDestroy(e.controlStream);
  if (e.watchStream) gpu::streamDestroy(e.watchStream);
  if (e.watchWord) {
    gpu::hostUnregister(e.watchWord);
    free(e.watchWord);
  }
  if (e.gemmPartials) gpu::deviceFree(e.gemmPartials);
  e.product.release();
  e.pooled.release();
  gpu::hostUnregister(e.queue->memory());
  return e.released = true;
}

Engine::~Engine() { stop(); }

void Engine::setWake(std::function<void()> wake) { impl_->wake = std::move(wake); }

void Engine::boundHandovers(uint64_t limitNs) {
  Impl& e = *impl_;
  if (!e.inProcess || e.stopped || e.guard) return;
  // A few looks per limit, at least one a second: a look reads three words of host memory.
  const uint64_t periodNs = std::clamp<uint64_t>(limitNs / 8, 1000000, 1000000000);
  // Logs that the kernel has not left at the first look after firing and once more a minute later
  // (its ops then stay unfinished, and the communicator's memory cannot be freed under it).
  e.guard = std::make_unique<HandoverGuard>(
      *e.queue, limitNs, periodNs, [&e, first = true, sinceNs = uint64_t{0}, warned = false]() mutable {
        // The guard's own thread: the device and capture mode the status watch's thread also sets, so
        // that its CUDA calls neither start a context on another device nor break a capture.
        gpu::Outcome o = gpu::setDevice(e.device);
        if (o) o = gpu::relaxCaptureMode();
        // The queue's stop word, which every worker reads every kHostEvery-th poll, and the control
        // block's error and stop, which the waits inside an op read (their copy goes through the
        // control stream, which may be the held one: it lands once the kernel has left).
        prim::atomicStore<prim::Order::kRelease>(&e.queue->header()->stop, 1u);
        if (first) e.raise({&dev::EngineControl::error, &dev::EngineControl::stop}, 0.0);
        if (o) o = gpu::streamDrain(e.stream, first ? 2.0 : 0.05);
        const uint64_t now = prim::nowNs();
        if (first) sinceNs = now;
        if (!o && (first || (!warned && now - sinceNs > 60000000000ull))) {
          WEFT_LOG(kError, kEngine, "the persistent kernel has not left {}{}: {}", first ? "yet" : "after ",
                   first ? "" : std::to_string((now - sinceNs) / 1000000000ull) + " s", o.message);
          warned = !first;
        }
        first = false;
        return static_cast<bool>(o);
      });
}

bool Engine::kernelRunning(double waitS) {
  Impl& e = *impl_;
  // A stream that faulted counts as running: nothing is freed under a kernel in an unknown state.
  return e.persistent && !e.remote && !e.stopped && !gpu::streamDrain(e.stream, waitS);
}

void Engine::restartIfIdle() {
  Impl& e = *impl_;
  if (e.persistent && !e.remote && !e.stopped) requireGpu(e.ensureRunning(), "starting the persistent kernel again");
}

bool Engine::linesSafe() { return gpu::nvlinkActive(); }

bool Engine::checkStream(void* stream) {
  bool capturing = false;
  requireGpu(gpu::streamIsCapturing(stream, &capturing), "stream: cannot query its capture state",
             Code::kInvalidArgument);
  return capturing;
}

// Both engines capture the op kernel: a replayed graph cannot take queue tickets (its stream
// writes would replay the values of capture time), and the kernel needs none.
void Engine::capture(const dev::OpDesc& desc, void* stream) {
  requireGpu(impl_->launchSized(desc, stream), "stream: adding the op to the graph being captured");
}

// The GEMM always (its tiles want the SM's shared memory beside a resident kernel); through
// weftd's engine also the GEMV, whose speed is the loads in flight on every SM, where weftd's
// kernel has a few dozen blocks.
bool Engine::runsAlone(const dev::OpDesc& desc) const {
  const auto kind = static_cast<dev::OpKind>(desc.kind);
  return (kind == dev::OpKind::kGemmAllToAll && impl_->persistent) || (impl_->remote && gemvKind(kind));
}

dev::Status Engine::enqueue(uint64_t ticket, const dev::OpDesc& desc, void* stream, uint64_t timeoutNs) {
  dev::Status st = dev::Status::kOk;
  const bool alone = runsAlone(desc);
  const gpu::Outcome o = !impl_->persistent ? impl_->enqueueLaunched(ticket, desc, stream)
                         : alone            ? impl_->enqueueAlone(ticket, desc, stream, timeoutNs, &st)
                                            : impl_->enqueuePersistent(ticket, desc, stream, timeoutNs, &st);
  requireGpu(o, "enqueueing the op on the stream");
  return st;
}

dev::Status Engine::finish(uint64_t, uint64_t) { return dev::Status::kOk; }

namespace {

// A vendor BLAS call (or the embedding's pooling kernel) on `stream`, ordered as a launched op is:
// after the engine's earlier ops on other streams, and before its later ones (in a capture, the
// graph orders it).
void orderedVendorCall(void*& lastStream, void* lastOp, void* stream, bool capturing,
                       const std::function<gpu::Outcome()>& call, const char* what) {
  gpu::Outcome o;
  if (!capturing && lastStream && lastStream != stream) o = gpu::streamWaitEvent(stream, lastOp);
  if (o) o = call();
  if (o && !capturing) o = gpu::eventRecord(lastOp, stream);
  requireGpu(o, what);
  if (!capturing) lastStream = stream;
}

}  // namespace

// Launched engine, and captured ops: an eager kernel beside a persistent engine (weftd's) would
// need an op's ticket to wait for the engine's earlier ops on other streams (the GEMM's and the
// GEMV's marker), and the path table was measured with launched ops.
bool Engine::vendorGemv(const GemvOperands& g, void* stream, bool capturing) {
  Impl& e = *impl_;
  if (!e.blas || (e.persistent && !capturing) || !gpu::VendorBlas::fits(g.batch, g.n, g.k)) return false;
  orderedVendorCall(
      e.lastStream, e.lastOp, stream, capturing,
      [&] { return e.blas->gemv(g.x, g.w, g.y, g.batch, g.n, g.k, g.dt, stream); },
      "the vendor BLAS's GEMV (gemv_path blas)");
  return true;
}

const void* Engine::vendorGemm(const GemmOperands& g, void* stream, bool capturing) {
  Impl& e = *impl_;
  if (!e.blas || (e.persistent && !capturing) || !gpu::VendorBlas::fits(g.tokens, g.h, g.k)) return nullptr;
  void* product =
      e.product.atLeast(g.tokens * g.h * dev::dtypeSize(g.dt), "the GEMM's product buffer (gemm_path blas)");
  orderedVendorCall(
      e.lastStream, e.lastOp, stream, capturing,
      [&] { return e.blas->gemm(g.a, g.w, product, g.tokens, g.k, g.h, g.dt, stream); },
      "the vendor BLAS's GEMM (gemm_path blas)");
  return product;
}

void* Engine::poolEmbedding(dev::OpDesc& pool, uint64_t bytes, void* stream, bool capturing) {
  Impl& e = *impl_;
  if (e.persistent && !capturing) return nullptr;
  void* pooled = e.pooled.atLeast(bytes, "the embedding's pooled vectors (embedding_path unfused)");
  pool.args.embedding.pooled = reinterpret_cast<uint64_t>(pooled);
  orderedVendorCall(
      e.lastStream, e.lastOp, stream, capturing, [&] { return e.launchSized(pool, stream); },
      "the embedding's pooling kernel (embedding_path unfused)");
  return pooled;
}

std::optional<uint64_t> Engine::itemsFinished(double seconds) {
  Impl& e = *impl_;
  if (e.persistent || e.stopped) return std::nullopt;
  gpu::Outcome o;
  if (!e.watchStream) {
    // This thread's first CUDA call: the engine's device, and leave to other threads' captures
    // in the global mode (PyTorch's default) a thread that touches no stream of theirs.
    o = gpu::setDevice(e.device);
    if (o) o = gpu::relaxCaptureMode();
    void* word = nullptr;
    if (o && posix_memalign(&word, 64, 64) != 0) o = gpu::Outcome{gpu::Fault::kOutOfMemory, "posix_memalign"};
    if (o) {
      e.watchWord = static_cast<uint64_t*>(word);
      *e.watchWord = 0;
      void* unused = nullptr;
      o = gpu::hostRegister(e.watchWord, 64, &unused);
      if (!o) {
        free(e.watchWord);
        e.watchWord = nullptr;
      }
    }
    if (o) o = gpu::streamCreateNonBlocking(&e.watchStream);
    if (!o) {
      WEFT_LOG(kWarn, kEngine, "status page: cannot read the engine's progress: {}", o.message);
      return std::nullopt;
    }
  }
  o = gpu::copyToHostAsync(e.watchWord, &e.view.control->itemsFinished, sizeof(uint64_t), e.watchStream);
  if (o) o = gpu::streamDrain(e.watchStream, seconds);
  if (!o) return std::nullopt;
  return prim::atomicLoad<prim::Order::kAcquire>(e.watchWord);
}

bool Engine::countsItems() const { return !impl_->persistent; }

std::string Engine::kernelFault() {
  Impl& e = *impl_;
  if (!e.persistent || e.remote || e.stopped) return "";
  const gpu::Outcome o = gpu::streamFault(e.stream);
  return o ? "" : o.message;
}

uint32_t Engine::itemsOf(const dev::OpDesc& desc) const {
  // An op that runs alone beside a persistent engine takes its ticket with a one-item marker op (enqueueAlone), whose
  // queue slot is what the status watch reads.
  if (impl_->persistent) return runsAlone(desc) ? 1u : desc.nitems;
  return impl_->asLaunched(desc).nitems;
}

bool Engine::quiesce(double seconds) {
  Impl& e = *impl_;
  if (!e.lastStream) return true;  // the persistent engine's own ops are tracked by the queue
  const gpu::Outcome o = gpu::eventDrain(e.lastOp, seconds);
  return o || o.fault == gpu::Fault::kShuttingDown;
}

void Engine::raise(std::initializer_list<ControlWord> words) { impl_->raise(words); }

int Engine::groupsFor(dev::OpKind kind) const { return impl_->groupsFor(kind); }

void* Engine::queueOnDevice(void* host) const { return impl_->onDevice(static_cast<uint8_t*>(host)); }

std::string Engine::describe() const {
  std::string name = "?";
  gpu::deviceName(impl_->device, &name);
  const std::string how =
      impl_->remote ? "weftd's persistent kernel (service mode), through the shared queue"
      : impl_->persistent
          ? "persistent kernel of " + std::to_string(impl_->workers) + " x " + std::to_string(impl_->threads) +
                " threads, idle exit after " + std::to_string(impl_->view.idleNs / 1000) + " us"
          : "a kernel of up to " + std::to_string(impl_->workers) + " x " + std::to_string(impl_->threads) +
                " threads per op (" + std::to_string(groupsFor(dev::OpKind::kEmbeddingAllToAll)) +
                " for an embedding op, " + std::to_string(groupsFor(dev::OpKind::kGemvAllReduce)) + " for a GEMV, " +
                std::to_string(groupsFor(dev::OpKind::kAllReduceOneShot)) +
                " for a one-shot AllReduce), on the caller's stream";
  const std::string gemm =
      ", a GEMM + All-to-All as its own kernel of " + std::to_string(impl_->gemmBlocks) + " blocks";
  const std::string proxy = impl_->proxied ? "; kernels that post to the host proxy" : "";
  return "GPU " + std::to_string(impl_->device) + " (" + name + "), " + how + gemm + proxy;
}

std::string Engine::deviceKey() {
  int device = 0;
  std::string id;
  if (!gpu::currentDevice(&device) || !gpu::devicePciId(device, &id)) return "";
  return id;
}

std::string gpuModel() {
  int device = 0;
  std::string name;
  if (!gpu::currentDevice(&device) || !gpu::deviceName(device, &name)) return "";
  for (char& c : name)
    if (c == ' ' || c == '\t') c = '_';
  return name;
}

// The default stream (legacy semantics) waits for every blocking stream's earlier work, and the
// launched engine's ops run on the caller's streams, so draining it drains them.
void deviceSynchronize(double seconds) { requireGpu(gpu::streamDrain(nullptr, seconds), "waiting for the device"); }

void selectDevice(int index) {
  int count = 0;
  requireGpu(gpu::deviceCount(&count), "counting the devices");
  if (count <= 0) throw Error(Code::kSystem, "no device to run on");
  requireGpu(gpu::setDevice(index % count), "selecting device " + std::to_string(index % count));
}

void copyToDevice(void* dst, const void* src, uint64_t bytes) {
  requireGpu(gpu::copyToDevice(dst, src, bytes), "copying to the device");
}

std::string deviceSummary() {
  int n = 0;
  gpu::Outcome o = gpu::deviceCount(&n);
  if (!o) return "no usable GPU (" + o.message + ")";
  std::string out = std::to_string(n) + " GPU(s)";
  for (int d = 0; d < n; ++d) {
    std::string name = "?";
    gpu::deviceName(d, &name);
    out += (d ? ", " : ": ") + std::to_string(d) + " " + name;
  }
  return out;
}

}  // namespace weft
