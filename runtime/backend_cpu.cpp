// CPU backend: the heap is POSIX shared memory mapped by every local rank, the engine is a thread
// per worker, and every op is waited for on the calling thread (there are no streams).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "backend.hpp"
#include "bootstrap_exchange.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "device/coop_device.hpp"
#include "device/cpu/cpu_engine.hpp"
#include "device/dtype_device.hpp"
#include "device/engine_device.hpp"
#include "transport/peers.hpp"

namespace weft {

struct HeapMemory::Impl {
  std::unique_ptr<transport::PeerTable> peers;
};

HeapMemory::HeapMemory(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes, uint64_t,
                       const transport::ProxyOptions& proxy)
    : impl_(std::make_unique<Impl>()) {
  BootstrapExchange ex(boot);
  impl_->peers = std::make_unique<transport::PeerTable>(ex, paths, bytes, proxy);
}

HeapMemory::HeapMemory(int rank, const std::vector<int>& fds, uint64_t bytes) : impl_(std::make_unique<Impl>()) {
  std::vector<transport::ShmSegment> segments;
  for (size_t r = 0; r < fds.size(); ++r)
    segments.push_back(transport::ShmSegment::map(fds[r], bytes, "weftd's heap segment of rank " + std::to_string(r)));
  impl_->peers = std::make_unique<transport::PeerTable>(rank, std::move(segments));
}

HeapMemory::~HeapMemory() = default;

DeviceAllocation deviceAllocationOf(const void*, const char* arg) {
  throw Error(Code::kNotSupported, std::string(arg) + ": the CPU backend has no device memory to map");
}

struct ServedEngine::Impl {
  dev::CpuEngine threads;
  dev::EngineControl* control = nullptr;
};

ServedEngine::ServedEngine(const dev::CommView& view, WorkQueue&, int workers, uint64_t, const std::string& gpuPciId,
                           int)
    : impl_(std::make_unique<Impl>()) {
  if (!gpuPciId.empty()) throw Error(Code::kInvalidUsage, "attach: this weftd serves the CPU backend");
  impl_->control = view.control;
  dev::CommView v = view;
  v.idleNs = 0;  // threads block no device-wide synchronisation: they stay
  impl_->threads.start(v, workers, 0);
}
ServedEngine::~ServedEngine() = default;
void ServedEngine::raise(std::initializer_list<ControlWord> words) {
  for (ControlWord w : words) prim::atomicStore<prim::Order::kRelease>(&(impl_->control->*w), 1u);
}
bool ServedEngine::join() {
  impl_->threads.join();
  return true;
}
std::string ServedEngine::fault() { return ""; }
bool ServedEngine::running() { return false; }
void ServedEngine::wake() {}
bool ServedEngine::holdsRetired() const { return false; }
int ServedEngine::device() const { return -1; }
void ServedEngine::closeRetired() {}
uint64_t ServedEngine::mapInput(const unsigned char (&)[64], uint64_t, uint64_t, bool) {
  throw Error(Code::kInvalidUsage, "map memory: the CPU backend's engine in weftd reads inputs through staging");
}

struct ServedHeap::Impl {
  transport::ShmSegment shm;
};

ServedHeap::ServedHeap(const std::string& gpuPciId, uint64_t bytes, uint64_t, const std::string& what, int* fd)
    : impl_(std::make_unique<Impl>()) {
  if (!gpuPciId.empty())
    throw Error(Code::kInvalidUsage, "attach: this weftd serves the CPU backend; it cannot make heaps on GPUs");
  impl_->shm = transport::ShmSegment::createAnonymous(what, bytes, fd);  // zero-filled
}
ServedHeap::~ServedHeap() = default;
uint8_t* ServedHeap::data() const { return static_cast<uint8_t*>(impl_->shm.data()); }
uint64_t ServedHeap::size() const { return impl_->shm.size(); }
void ServedHeap::failEngine(uint32_t status) {
  uint32_t none = 0;
  prim::atomicCas<prim::Order::kAcqRel>(&reinterpret_cast<dev::EngineControl*>(data())->error, none, status);
}
uint8_t* HeapMemory::base(int rank) const { return impl_->peers->base(rank); }
uint8_t* const* HeapMemory::engineBases() const { return impl_->peers->engineBases(); }
transport::Proxy* HeapMemory::proxy() const { return impl_->peers->proxy(); }

struct Engine::Impl {
  WorkQueue* queue;
  dev::EngineControl* control;
  dev::CpuEngine threads;
  int weftdWorkers = 0;          // mode "weftd": weftd runs this many workers over the queue; none run here
  std::vector<uint8_t> product;  // vendorGemm's
  std::vector<uint8_t> pooled;   // poolEmbedding's
  dev::CommView view;            // poolEmbedding's (the workers have their own copy)
};

Engine::Engine(const dev::CommView& view, WorkQueue& queue, int workers, const std::string& mode, int, bool)
    : impl_(std::make_unique<Impl>()) {
  impl_->queue = &queue;
  impl_->control = view.control;
  impl_->view = view;
  if (mode == "weftd") {
    impl_->weftdWorkers = workers;
    return;
  }
  // Threads never block a device-wide synchronisation, so they need not leave when idle.
  dev::CommView v = view;
  v.idleNs = 0;
  impl_->threads.start(v, workers, 0);
}

// Mode "weftd": the caller has had weftd stop its workers (service::Client::detach) first.
bool Engine::stop() {
  impl_->threads.join();
  impl_->queue->completeUnfinished();
  return true;
}

Engine::~Engine() { stop(); }

void Engine::setWake(std::function<void()>) {}  // weftd's threads never leave
bool Engine::kernelRunning(double) { return false; }
void Engine::restartIfIdle() {}
// The CPU engine's ops are handed over by the calling thread itself.
void Engine::boundHandovers(uint64_t) {}

bool Engine::linesSafe() { return true; }

std::string Engine::deviceKey() { return ""; }

bool Engine::checkStream(void* stream) {
  if (stream)
    throw Error(Code::kInvalidArgument,
                "stream: the CPU backend has no streams; pass NULL (the call returns when "
                "the op is complete)");
  return false;
}

void Engine::capture(const dev::OpDesc&, void*) {
  throw Error(Code::kNotSupported, "stream: the CPU backend has no streams, so no graphs to capture into");
}

dev::Status Engine::enqueue(uint64_t ticket, const dev::OpDesc& desc, void*, uint64_t timeoutNs) {
  const dev::Status st = impl_->queue->publish(ticket, desc, /*hostWaits=*/true, timeoutNs);
  if (st == dev::Status::kOk) impl_->queue->markReady(ticket);
  return st;
}

dev::Status Engine::finish(uint64_t ticket, uint64_t stallNs) {
  return impl_->queue->wait(ticket, stallNs, 1000000000ull);
}

// No vendor BLAS on the CPU backend: the `blas` path runs weft's GEMV.
bool Engine::vendorGemv(const GemvOperands&, void*, bool) { return false; }

// The product on the calling thread, summed over k in order in float32, as the fused op's CPU
// tile sums it. Never under weftd's engine, which reads only memory that weftd maps.
const void* Engine::vendorGemm(const GemmOperands& g, void*, bool) {
  Impl& e = *impl_;
  if (e.weftdWorkers) return nullptr;
  const uint64_t es = dev::dtypeSize(g.dt);
  e.product.resize(g.tokens * g.h * es);
  const auto* a = static_cast<const uint8_t*>(g.a);
  const auto* w = static_cast<const uint8_t*>(g.w);
  std::vector<float> row(g.h);
  for (uint64_t t = 0; t < g.tokens; ++t) {
    std::fill(row.begin(), row.end(), 0.f);
    for (uint64_t kk = 0; kk < g.k; ++kk) {
      const float x = dev::loadAsFloat(a, t * g.k + kk, g.dt);
      for (uint64_t j = 0; j < g.h; ++j) row[j] += x * dev::loadAsFloat(w, kk * g.h + j, g.dt);
    }
    uint8_t* out = e.product.data() + t * g.h * es;
    for (uint64_t j = 0; j < g.h; ++j) dev::storeFromFloat(out, j, g.dt, row[j]);
  }
  return e.product.data();
}

// On the calling thread (the communicator's submit lock held, so nothing is queued meanwhile),
// once every op queued before has completed: the engine's counters are then the ones the exchange
// will start from, and no earlier exchange still reads the buffer. That wait is bounded by the
// ops' own timeouts; past it, null (the op runs fused). Never under weftd's engine, which reads
// only memory that weftd maps.
void* Engine::poolEmbedding(dev::OpDesc& pool, uint64_t bytes, void*, bool) {
  Impl& e = *impl_;
  if (e.weftdWorkers) return nullptr;
  const uint64_t until = prim::nowNs() + e.view.timeoutNs + 1000000000ull;
  while (e.queue->inFlight() != 0) {
    if (prim::nowNs() > until) return nullptr;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  if (e.pooled.size() < bytes) e.pooled.resize(bytes);
  pool.args.embedding.pooled = reinterpret_cast<uint64_t>(e.pooled.data());
  const dev::OpSeq seq = dev::opSeq(dev::loadCounters(e.control), pool);
  dev::SoloCoop c;
  for (uint32_t item = 0; item < pool.nitems && dev::stopReason(e.view) == dev::Status::kOk; ++item)
    dev::EmbeddingPoolOp::run(c, e.view, pool, seq, item);
  return e.pooled.data();
}

bool Engine::quiesce(double) { return true; }

std::optional<uint64_t> Engine::itemsFinished(double) { return std::nullopt; }

bool Engine::countsItems() const { return false; }
std::string Engine::kernelFault() { return ""; }
bool Engine::runsAlone(const dev::OpDesc&) const { return false; }

uint32_t Engine::itemsOf(const dev::OpDesc& desc) const { return desc.nitems; }

void Engine::raise(std::initializer_list<ControlWord> words) {
  for (ControlWord w : words) prim::atomicStore<prim::Order::kRelease>(&(impl_->control->*w), 1u);
}

void* Engine::queueOnDevice(void* host) const { return host; }

int Engine::groupsFor(dev::OpKind) const {
  return impl_->weftdWorkers ? impl_->weftdWorkers : impl_->threads.workers();
}

std::string Engine::describe() const {
  if (impl_->weftdWorkers) return std::to_string(impl_->weftdWorkers) + " CPU worker thread(s) in weftd";
  return std::to_string(impl_->threads.workers()) + " CPU worker thread(s)";
}

std::string gpuModel() { return "cpu"; }

void deviceSynchronize(double) {}

void selectDevice(int) {}

void copyToDevice(void* dst, const void* src, uint64_t bytes) { std::memcpy(dst, src, bytes); }

std::string deviceSummary() {
  return "CPU backend: " + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " online CPU(s) run the engine workers";
}

}  // namespace weft
