// GPU backends (CUDA, HIP), service mode: the engine weftd runs on a rank's GPU (ServedEngine),
// over the rank's heap and the inputs it maps from the rank by IPC handle.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/undo.hpp"
#include "device/gpu_host.hpp"
#include "transport/p2p/gpu_require.hpp"

namespace weft {

using transport::requireGpu;

struct ServedEngine::Impl {
  int device = 0;
  void* deviceBases = nullptr;  // the view's table of heap bases, on the rank's GPU
  std::unique_ptr<Engine> engine;
  struct Mapped {
    uint64_t rankBase, bytes;  // the allocation in the rank
    void* here;
    unsigned char handle[64];  // its IPC handle
    bool opened;               // here is an import of its own; else inside another one's (alias)
    void* owner;               // an alias: the `here` of the import it lies in
  };
  std::vector<Mapped> mapped;   // the rank's inputs, mapped by IPC handle
  std::vector<Mapped> retired;  // mappings of inputs the rank has freed, for closeRetired
  // Whether a live alias points into import `o` (it must stay open).
  bool aliased(const Mapped& o) const {
    return std::any_of(mapped.begin(), mapped.end(), [&](const Mapped& a) { return !a.opened && a.owner == o.here; });
  }
  std::string wakeFault;  // a relaunch that failed (wake)
  static constexpr size_t kMaxMapped = 4096;
};

ServedEngine::ServedEngine(const dev::CommView& view, WorkQueue& queue, int workers, uint64_t idleNs,
                           const std::string& gpuPciId, int sharers)
    : impl_(std::make_unique<Impl>()) {
  Impl& e = *impl_;
  if (gpuPciId.empty()) throw Error(Code::kInvalidUsage, "attach: this weftd serves GPUs; a rank must name its GPU");
  requireGpu(gpu::deviceByPciId(gpuPciId, &e.device), "attach: finding the GPU at " + gpuPciId, Code::kInvalidUsage);
  requireGpu(gpu::setDevice(e.device), "attach: selecting the rank's GPU");
  const size_t bytes = (static_cast<size_t>(view.nranks) + 1) * sizeof(uint8_t*);
  requireGpu(gpu::deviceMalloc(&e.deviceBases, bytes), "the engine's table of heap bases");
  Undo freeBases{[&] { gpu::deviceFree(e.deviceBases); }};
  requireGpu(gpu::copyToDevice(e.deviceBases, view.heap, bytes), "the engine's table of heap bases");
  dev::CommView v = view;
  v.heap = static_cast<uint8_t* const*>(e.deviceBases);
  // A kernel that stayed would hold its SMs from the ranks' own kernels and from weftd's other
  // communicators, and keep weftd from ever freeing memory on the GPU (reclaim).
  v.idleNs = idleNs;
  e.engine = std::make_unique<Engine>(v, queue, workers, "served", sharers, /*proxied=*/false);
  freeBases.armed = false;
}

// Only once join has returned true and no kernel of weftd's runs (CommRegistry::reclaim).
ServedEngine::~ServedEngine() {
  Impl& e = *impl_;
  if (!e.engine) return;
  (void)gpu::setDevice(e.device);
  e.engine.reset();
  for (const auto* list : {&e.mapped, &e.retired})
    for (const Impl::Mapped& m : *list)
      if (m.opened) gpu::ipcClose(m.here);
  gpu::deviceFree(e.deviceBases);
}

void ServedEngine::raise(std::initializer_list<ControlWord> words) { impl_->engine->raise(words); }

std::string ServedEngine::fault() { return impl_->wakeFault.empty() ? impl_->engine->kernelFault() : impl_->wakeFault; }

bool ServedEngine::join() {
  Impl& e = *impl_;
  (void)gpu::setDevice(e.device);
  // The workers check the stop word in every wait, so the kernel leaves within milliseconds; one
  // still there may still use what it maps.
  return !e.engine->kernelRunning(10.0);
}

bool ServedEngine::running() { return impl_->engine->kernelRunning(); }

void ServedEngine::wake() {
  Impl& e = *impl_;
  if (!e.wakeFault.empty()) return;
  try {
    requireGpu(gpu::setDevice(e.device), "selecting the rank's GPU");
    e.engine->restartIfIdle();
  } catch (const Error& err) {
    e.wakeFault = std::string("starting the persistent kernel again: ") + err.what();
  }
}

int ServedEngine::device() const { return impl_->device; }

bool ServedEngine::holdsRetired() const {
  const Impl& e = *impl_;
  return std::any_of(e.retired.begin(), e.retired.end(), [&](const Impl::Mapped& m) { return !e.aliased(m); });
}

void ServedEngine::closeRetired() {
  Impl& e = *impl_;
  if (e.retired.empty()) return;
  (void)gpu::setDevice(e.device);
  // An import with live aliases (mapInput) stays open until they go.
  std::vector<Impl::Mapped> kept;
  for (const Impl::Mapped& m : e.retired)
    if (m.opened && e.aliased(m))
      kept.push_back(m);
    else if (m.opened)
      gpu::ipcClose(m.here);
  e.retired.swap(kept);
}

uint64_t ServedEngine::mapInput(const unsigned char (&handle)[64], uint64_t base, uint64_t bytes, bool mayDefer) {
  Impl& e = *impl_;
  requireGpu(gpu::setDevice(e.device), "map memory: selecting the rank's GPU");
  // The rank asks only for live allocations: one mapped here that overlaps it was freed there.
  // Closing it now would wait for weftd's kernels to end, so it is retired (closeRetired).
  for (auto m = e.mapped.begin(); m != e.mapped.end();)
    if (m->rankBase < base + bytes && base < m->rankBase + m->bytes) {
      if (m->opened) e.retired.push_back(*m);  // an alias has nothing to close
      m = e.mapped.erase(m);
    } else {
      ++m;
    }
  if (e.mapped.size() + e.retired.size() >= Impl::kMaxMapped)
    throw Error(Code::kInvalidUsage, "map memory: the rank's engine in weftd maps " + std::to_string(Impl::kMaxMapped) +
                                         " allocations already; pass inputs in fewer allocations (or the heap)");
  // The driver may hand the rank the memory it freed again, at the same address and with the same
  // IPC handle (a new allocation id all the same): the retired mapping is that memory, and the
  // driver would refuse to open it twice.
  const auto same = std::find_if(e.retired.begin(), e.retired.end(), [&](const Impl::Mapped& m) {
    return m.rankBase == base && m.bytes == bytes && std::memcmp(m.handle, handle, sizeof m.handle) == 0;
  });
  if (same != e.retired.end()) {
    e.mapped.push_back(*same);
    e.retired.erase(same);
    return reinterpret_cast<uint64_t>(e.mapped.back().here);
  }
  gpu::IpcHandle h{};
  std::memcpy(h.bytes, handle, sizeof h.bytes);
  void* p = nullptr;
  const gpu::Outcome opened = gpu::ipcImport(&p, h);
  Impl::Mapped m{base, bytes, p, {}, true, nullptr};
  std::memcpy(m.handle, handle, sizeof m.handle);
  if (!opened) {
    // "Already mapped": the driver cut the new allocation from a block of memory that an import of
    // weftd's maps already (a neighbour's, or a freed allocation's at the same address), and it
    // maps a block only once. An import maps its whole block, contiguously here as in the rank:
    // where the new allocation lies in it, the new mapping is an alias into it, and the import
    // stays open while the alias lives (closeRetired).
    const auto holds = [&](const Impl::Mapped& o) {
      uint64_t blockHere = 0, blockBytes = 0;
      if (!o.opened || !gpu::addressRange(o.here, &blockHere, &blockBytes)) return false;
      const uint64_t blockInRank = o.rankBase - (reinterpret_cast<uint64_t>(o.here) - blockHere);
      return blockInRank <= base && base + bytes <= blockInRank + blockBytes;
    };
    const Impl::Mapped* owner = nullptr;
    for (const auto* list : {&e.retired, &e.mapped})
      for (const Impl::Mapped& o : *list)
        if (!owner && holds(o)) owner = &o;
    if (owner) {
      WEFT_LOG(kDebug, kService, "map memory: {:#x} ({} bytes) lies in the block mapped for {:#x}: an alias", base,
               bytes, owner->rankBase);
      m.here = static_cast<uint8_t*>(owner->here) + (base - owner->rankBase);
      m.opened = false;
      m.owner = owner->here;
      e.mapped.push_back(m);
      return reinterpret_cast<uint64_t>(m.here);
    }
    if (mayDefer && std::any_of(e.retired.begin(), e.retired.end(), [&](const Impl::Mapped& o) {
          return o.rankBase < base + bytes && base < o.rankBase + o.bytes;
        })) {
      // Other memory at an address whose old mapping is still open: after reclaim has closed it.
      WEFT_LOG(kInfo, kService, "map memory: {}; the mapping of an allocation freed at that address is closed first",
               opened.message);
      return 0;
    }
  }
  requireGpu(opened, "map memory: opening the rank's IPC handle", Code::kInvalidArgument);
  e.mapped.push_back(m);
  return reinterpret_cast<uint64_t>(p);
}

}  // namespace weft
