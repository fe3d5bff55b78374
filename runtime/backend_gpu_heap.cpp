// GPU backends (CUDA, HIP), memory: where every rank's heap is as this process's device addresses
// it (HeapMemory), the heap weftd makes for a rank (ServedHeap), and the allocations weftd's engine
// maps from a rank (deviceAllocationOf).
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend.hpp"
#include "bootstrap_exchange.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "device/gpu_host.hpp"
#include "transport/p2p/device_heap.hpp"
#include "transport/p2p/device_segment.hpp"
#include "transport/p2p/gpu_require.hpp"
#include "transport/peers.hpp"

namespace weft {

using transport::requireGpu;

// Where every rank's heap is, as this process's device addresses it:
//   - every peer mapped (one node): the heap is device memory, exported to the node's peers by IPC
//     (transport::DeviceHeap);
//   - a job with peers on other nodes: the heap is host memory, the CPU backend's peer table
//     (POSIX shared memory mapped by the node's peers, a mirror of each remote peer's heap, the
//     host proxy), registered so the device addresses it. The kernels then store a tile bound for
//     another node straight into pinned host memory, where the network reads it, and read what
//     arrives where the network wrote it; neither Debian's UCX nor its libfabric can register
//     device memory (docs/design-notes.md, "The host proxy on a GPU").
struct HeapMemory::Impl {
  std::unique_ptr<transport::DeviceHeap> deviceHeap;  // every peer mapped: device memory by IPC
  std::unique_ptr<transport::PeerTable> peers;        // proxy peers: host memory (and the proxy)
  std::vector<transport::DeviceSegment> segments;     // service mode: every rank's heap, made by weftd
  std::vector<void*> registered;                      // host memory mapped into the device
  void* proxyWords = nullptr;                         // device memory: the ring's head, its cached tail, the ProxyView
  std::vector<uint8_t*> bases;
  void* deviceBases = nullptr;

  ~Impl() {
    if (deviceBases) gpu::deviceFree(deviceBases);
    deviceHeap.reset();
    segments.clear();
    if (proxyWords) gpu::deviceFree(proxyWords);
    // Unregistered before the peer table unmaps the memory (the proxy has stopped: Comm::~Comm).
    for (void* p : registered) gpu::hostUnregister(p);
    peers.reset();
  }

  void mapDevice(Bootstrap& boot, uint64_t bytes, uint64_t controlBytes);
  // The bases, where the kernels read them (deviceBases).
  void uploadBases() {
    requireGpu(gpu::deviceMalloc(&deviceBases, bases.size() * sizeof(uint8_t*)), "the table of heap bases");
    requireGpu(gpu::copyToDevice(deviceBases, bases.data(), bases.size() * sizeof(uint8_t*)),
               "the table of heap bases");
  }
  void mapHost(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes,
               const transport::ProxyOptions& proxy);
  // Registers host memory; the device must address it where the host does (the heap's pointers
  // are handed to the caller, who passes them to kernels and to weft alike).
  void registerHost(void* p, uint64_t bytes, const std::string& what) {
    void* onDevice = nullptr;
    requireGpu(gpu::hostRegister(p, bytes, &onDevice), "mapping " + what + " into the GPU");
    registered.push_back(p);
    if (onDevice != p)
      throw Error(Code::kNotSupported, "mapping " + what +
                                           " into the GPU: this GPU addresses registered host memory elsewhere than "
                                           "the host does, which the host proxy's heap needs");
  }
};

HeapMemory::HeapMemory(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes,
                       uint64_t controlBytes, const transport::ProxyOptions& proxy)
    : impl_(std::make_unique<Impl>()) {
  // The heap's kind is the job's: the ranks of a node map each other's heaps alike.
  uint32_t mine = 0;
  for (transport::Path p : paths) mine |= p == transport::Path::kProxy;
  std::vector<uint32_t> all(boot.nranks());
  boot.allGather(&mine, sizeof mine, all.data());
  uint32_t any = 0;
  for (uint32_t a : all) any |= a;
  if (any)
    impl_->mapHost(boot, paths, bytes, proxy);
  else
    impl_->mapDevice(boot, bytes, controlBytes);
  impl_->uploadBases();
  // No rank's op may reach a peer's control area before the peer zeroed it.
  boot.barrier();
}

void HeapMemory::Impl::mapDevice(Bootstrap& boot, uint64_t bytes, uint64_t controlBytes) {
  BootstrapExchange ex(boot);
  deviceHeap = std::make_unique<transport::DeviceHeap>(ex, bytes, controlBytes);
  bases.assign(boot.nranks() + 1, nullptr);  // no proxy view
  for (int r = 0; r < boot.nranks(); ++r) bases[r] = deviceHeap->base(r);
}

namespace {

// MemAvailable from /proc/meminfo, in bytes; 0 where it cannot be read.
uint64_t hostBytesAvailable() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return static_cast<uint64_t>(kib) * 1024;
}

// A proxy job pins its heap and a heap-sized mirror of every peer it reaches through the proxy.
// Pinning more than the host has fails deep in the driver or starves the machine, so every rank
// checks its own need first and all of them agree on the verdict (no rank is left waiting in a
// collective step that another rank never reaches).
void requirePinnedFits(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes) {
  struct Need {
    uint64_t pinned;
    uint64_t available;  // 0: unknown
  };
  uint64_t mirrors = 0;
  for (transport::Path p : paths) mirrors += p == transport::Path::kProxy;
  const Need mine{bytes * (1 + mirrors), hostBytesAvailable()};
  std::vector<Need> all(boot.nranks());
  boot.allGather(&mine, sizeof mine, all.data());
  for (int r = 0; r < boot.nranks(); ++r)
    if (all[r].available != 0 && all[r].pinned > all[r].available)
      throw Error(Code::kOutOfMemory,
                  "heap_bytes: rank " + std::to_string(r) + " would pin " + std::to_string(all[r].pinned) +
                      " bytes of host memory (its heap and a heap-sized mirror of each peer it reaches through the "
                      "host proxy) but its host has " +
                      std::to_string(all[r].available) + " bytes available; lower heap_bytes");
}

}  // namespace

void HeapMemory::Impl::mapHost(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes,
                               const transport::ProxyOptions& proxy) {
  const int n = boot.nranks(), me = boot.rank();
  requirePinnedFits(boot, paths, bytes);
  BootstrapExchange ex(boot);
  peers = std::make_unique<transport::PeerTable>(ex, paths, bytes, proxy);  // zero-filled
  bases.assign(n + 1, nullptr);
  for (int r = 0; r < n; ++r) {
    bases[r] = peers->base(r);
    registerHost(bases[r], bytes,
                 r == me                               ? "the symmetric heap (host memory: this job has proxy peers)"
                 : paths[r] == transport::Path::kProxy ? "the mirror of rank " + std::to_string(r) + "'s heap"
                                                       : "rank " + std::to_string(r) + "'s heap");
  }
  transport::Proxy* px = peers->proxy();
  if (!px || !peers->engineBases()[n]) return;  // no proxy peer of this rank's
  const transport::Region shared = px->deviceShared();
  registerHost(shared.base, shared.bytes, "the host proxy's trigger ring");
  struct Words {
    uint64_t head = 0, tailSeen = 0;
    dev::ProxyView view;
  } words;
  requireGpu(gpu::deviceMalloc(&proxyWords, sizeof words), "the host proxy's device words");
  auto* onDevice = static_cast<Words*>(proxyWords);
  words.view = px->deviceView(shared.base, &onDevice->head, &onDevice->tailSeen);
  requireGpu(gpu::copyToDevice(proxyWords, &words, sizeof words), "the host proxy's device words");
  bases[n] = reinterpret_cast<uint8_t*>(&onDevice->view);
}

HeapMemory::HeapMemory(int, const std::vector<int>& fds, uint64_t bytes) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const auto n = static_cast<int>(fds.size());
  m.bases.assign(n + 1, nullptr);  // no proxy view
  for (int r = 0; r < n; ++r) {
    m.segments.push_back(transport::DeviceSegment::map(fds[r], bytes, "weftd's heap of rank " + std::to_string(r)));
    m.bases[r] = static_cast<uint8_t*>(m.segments.back().data());
  }
  m.uploadBases();
}

HeapMemory::~HeapMemory() = default;

DeviceAllocation deviceAllocationOf(const void* ptr, const char* arg) {
  DeviceAllocation a;
  gpu::IpcHandle h{};
  const gpu::Outcome o = gpu::ipcRange(ptr, &h, &a.base, &a.size, &a.id);
  if (!o)
    throw Error(Code::kInvalidArgument,
                std::string(arg) + ": weftd's engine cannot map this memory (" + o.message +
                    "); pass memory from cudaMalloc or weft_mem_alloc, or set service_engine=rank to run the "
                    "engine in the rank");
  std::memcpy(a.handle, h.bytes, sizeof a.handle);
  return a;
}

struct ServedHeap::Impl {
  transport::DeviceSegment segment;
  int device = 0;
};

ServedHeap::ServedHeap(const std::string& gpuPciId, uint64_t bytes, uint64_t zeroBytes, const std::string& what,
                       int* fd)
    : impl_(std::make_unique<Impl>()) {
  if (gpuPciId.empty()) throw Error(Code::kInvalidUsage, "attach: this weftd serves GPUs; a rank must name its GPU");
  requireGpu(gpu::deviceByPciId(gpuPciId, &impl_->device), "attach: finding the GPU at " + gpuPciId,
             Code::kInvalidUsage);
  impl_->segment = transport::DeviceSegment::create(impl_->device, bytes, zeroBytes, fd, what);
}
ServedHeap::~ServedHeap() {
  // Unmapped on the device it was made for, whose granularity it was rounded to.
  if (impl_->segment.data() && gpu::setDevice(impl_->device)) impl_->segment.reset();
}
uint8_t* ServedHeap::data() const { return static_cast<uint8_t*>(impl_->segment.data()); }
uint64_t ServedHeap::size() const { return impl_->segment.size(); }
void ServedHeap::failEngine(uint32_t status) {
  // A plain store of the word: another failure the device recorded at the same moment is
  // overwritten, and the communicator has failed either way.
  void* stream = nullptr;
  gpu::Outcome o = gpu::setDevice(impl_->device);
  if (o) o = gpu::streamCreateNonBlocking(&stream);
  if (o) {
    auto* control = reinterpret_cast<dev::EngineControl*>(data());
    o = gpu::copyToDeviceAsync(&control->error, &status, sizeof status, stream);
    if (o) o = gpu::streamDrain(stream, 1.0);  // before `status` goes
    gpu::streamDestroy(stream);
  }
  if (!o) WEFT_LOG(kError, kService, "could not fail a rank's engine on its GPU: {}", o.message);
}
uint8_t* HeapMemory::base(int rank) const { return impl_->bases[rank]; }
transport::Proxy* HeapMemory::proxy() const { return impl_->peers ? impl_->peers->proxy() : nullptr; }
uint8_t* const* HeapMemory::engineBases() const { return static_cast<uint8_t* const*>(impl_->deviceBases); }

}  // namespace weft
