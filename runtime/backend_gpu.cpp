// GPU backends (CUDA, HIP): the heap is device memory that local peers map through IPC handles,
// the engine is the persistent kernel on its own stream polling the queue in pinned host memory,
// and an op reaches it in stream order: a stream write of the slot's `ready` word, then a stream
// wait on its `done` word.
#include <atomic>
#include <mutex>

#include "backend.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "device/gpu_host.hpp"

namespace weft {

namespace {

// Throws weft::Error for a failed GPU call; `what` says what weft was doing.
void require(const gpu::Outcome& o, const std::string& what, Code code = Code::kSystem) {
  if (o) return;
  if (o.fault == gpu::Fault::kOutOfMemory) code = Code::kOutOfMemory;
  if (o.fault == gpu::Fault::kNotSupported) code = Code::kNotSupported;
  throw Error(code, what + ": " + o.message);
}

// Runs on scope exit unless dismissed: frees what a half-finished constructor made.
template <typename F>
struct Undo {
  F f;
  bool armed = true;
  ~Undo() {
    if (armed) f();
  }
};
template <typename F>
Undo(F) -> Undo<F>;

}  // namespace

struct HeapMemory::Impl {
  void* own = nullptr;
  std::vector<void*> imported;
  std::vector<uint8_t*> bases;
  void* deviceBases = nullptr;

  ~Impl() {
    for (void* p : imported)
      if (p) gpu::ipcClose(p);
    if (deviceBases) gpu::deviceFree(deviceBases);
    if (own) gpu::deviceFree(own);
  }
};

HeapMemory::HeapMemory(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes,
                       uint64_t controlBytes)
    : impl_(std::make_unique<Impl>()) {
  transport::requireDirectPaths(paths);
  const int n = boot.nranks(), me = boot.rank();
  require(gpu::deviceMalloc(&impl_->own, bytes), "heap_bytes: the symmetric heap");
  require(gpu::memsetDevice(impl_->own, 0, controlBytes), "zeroing the heap's control area");
  gpu::IpcHandle mine{};
  require(gpu::ipcExport(&mine, impl_->own), "exporting the heap to local peers");
  std::vector<gpu::IpcHandle> all(n);
  boot.allGather(&mine, sizeof mine, all.data());
  impl_->bases.assign(n, nullptr);
  impl_->imported.assign(n, nullptr);
  for (int r = 0; r < n; ++r) {
    if (r == me) {
      impl_->bases[r] = static_cast<uint8_t*>(impl_->own);
      continue;
    }
    require(gpu::ipcImport(&impl_->imported[r], all[r]), "mapping rank " + std::to_string(r) + "'s heap");
    impl_->bases[r] = static_cast<uint8_t*>(impl_->imported[r]);
  }
  require(gpu::deviceMalloc(&impl_->deviceBases, n * sizeof(uint8_t*)), "the table of heap bases");
  require(gpu::copyToDevice(impl_->deviceBases, impl_->bases.data(), n * sizeof(uint8_t*)), "the table of heap bases");
  // No rank's op may reach a peer's control area before the peer zeroed it.
  boot.barrier();
}

HeapMemory::~HeapMemory() = default;
uint8_t* HeapMemory::base(int rank) const { return impl_->bases[rank]; }
uint8_t* const* HeapMemory::engineBases() const { return static_cast<uint8_t* const*>(impl_->deviceBases); }

struct Engine::Impl {
  WorkQueue* queue = nullptr;
  uint8_t* queueDevice = nullptr;  // the queue's shared memory as the GPU addresses it
  dev::CommView view;              // with device addresses
  void* stream = nullptr;
  int device = 0;
  int workers = 0;
  int threads = 256;
  std::mutex launchMutex;

  template <typename T>
  T* onDevice(T* host) const {
    return reinterpret_cast<T*>(queueDevice +
                                (reinterpret_cast<uint8_t*>(host) - static_cast<uint8_t*>(queue->memory())));
  }

  // The submitter's half of the idle-exit handshake (device/engine_device.hpp): the caller has
  // taken its ticket (raised `tail`); if no worker is alive after a full fence, none will serve
  // it, so start the kernel again. Kernels on the one engine stream run one after another.
  gpu::Outcome ensureRunning() {
    std::lock_guard<std::mutex> lock(launchMutex);
    gpu::fenceSeqCst();
    uint32_t* alive = queue->alive();
    for (int w = 0; w < workers; ++w)
      if (gpu::atomicLoad<gpu::Order::kAcquire>(&alive[w])) return {};
    return launch();
  }

  gpu::Outcome launch() {
    uint32_t* alive = queue->alive();
    for (int w = 0; w < workers; ++w) gpu::atomicStore<gpu::Order::kRelease>(&alive[w], 1u);
    const uint64_t first = gpu::atomicLoad<gpu::Order::kAcquire>(&queue->header()->completed);
    return gpu::launchPersistent(view, workers, threads, stream, first);
  }
};

Engine::Engine(const dev::CommView& view, WorkQueue& queue, int workers) : impl_(std::make_unique<Impl>()) {
  Impl& e = *impl_;
  e.queue = &queue;
  e.workers = workers;
  if (workers > static_cast<int>(WorkQueue::kMaxWorkers))
    throw Error(Code::kInvalidArgument, "persistent_ctas: at most " + std::to_string(WorkQueue::kMaxWorkers));
  require(gpu::currentDevice(&e.device), "finding the current device");
  void* mapped = nullptr;
  require(gpu::hostRegister(queue.memory(), queue.bytes(), &mapped), "mapping the work queue into the GPU");
  Undo unregister{[&] { gpu::hostUnregister(queue.memory()); }};
  e.queueDevice = static_cast<uint8_t*>(mapped);
  e.view = view;
  e.view.queue = e.onDevice(queue.header());
  e.view.slots = e.onDevice(queue.slots());
  e.view.alive = e.onDevice(queue.alive());
  require(gpu::streamCreateNonBlocking(&e.stream), "creating the engine's stream");
  Undo destroyStream{[&] { gpu::streamDestroy(e.stream); }};
  require(e.launch(), "starting the persistent kernel");
  unregister.armed = destroyStream.armed = false;
}

Engine::~Engine() {
  Impl& e = *impl_;
  // The caller set `stop`; every wait in the kernel checks it, so it exits within milliseconds.
  gpu::Outcome o = gpu::streamDrain(e.stream, 10.0);
  // At process exit the runtime may be gone before this communicator: nothing is left to free.
  if (o.fault == gpu::Fault::kShuttingDown) return;
  if (!o) {
    // Freeing memory under a running kernel would fault the GPU; leaking is the lesser harm.
    WEFT_LOG(kError, kEngine, "persistent kernel did not stop: {}; leaking its queue and stream", o.message);
    return;
  }
  e.queue->completeUnfinished();
  gpu::streamDestroy(e.stream);
  gpu::hostUnregister(e.queue->memory());
}

bool Engine::hostWaits() { return false; }

void Engine::checkStream(void* stream) {
  bool capturing = false;
  require(gpu::streamIsCapturing(stream, &capturing), "stream: cannot query its capture state", Code::kInvalidArgument);
  if (capturing)
    throw Error(Code::kNotSupported, "stream: is being captured into a graph; weft ops cannot be captured yet");
}

dev::Status Engine::submit(uint64_t ticket, void* stream, uint64_t) {
  Impl& e = *impl_;
  // The descriptor was written with plain stores; the stream's write of `ready` must follow them.
  std::atomic_thread_fence(std::memory_order_release);
  gpu::Outcome o = e.ensureRunning();
  if (o) o = gpu::streamWriteValue(stream, e.onDevice(e.queue->readyWord(ticket)), ticket + 1);
  if (o) o = gpu::streamWaitAtLeast(stream, e.onDevice(e.queue->doneWord(ticket)), ticket + 1);
  if (!o) {
    // The slot is published: let the engine drain it (the op fails at once) rather than wait forever.
    dev::CommView v;
    v.queue = e.queue->header();
    dev::recordFailure(v, dev::WaitSite{ticket, 0, -1, dev::WaitWhat::kOpDone}, dev::Status::kAborted, ticket + 1, 0);
    e.queue->markReady(ticket);
    require(o, "enqueueing the op on the stream");
  }
  return dev::Status::kOk;
}

std::string Engine::describe() const {
  std::string name = "?";
  gpu::deviceName(impl_->device, &name);
  return "GPU " + std::to_string(impl_->device) + " (" + name + "), persistent kernel of " +
         std::to_string(impl_->workers) + " x " + std::to_string(impl_->threads) + " threads, idle exit after " +
         std::to_string(impl_->view.idleNs / 1000) + " us";
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
