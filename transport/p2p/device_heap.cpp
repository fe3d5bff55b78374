#include "device_heap.hpp"

#include <string>

#include "gpu_require.hpp"

namespace weft::transport {

DeviceHeap::DeviceHeap(Exchange& ex, uint64_t bytes, uint64_t zeroBytes) {
  const int n = ex.nranks(), me = ex.rank();
  try {
    requireGpu(gpu::deviceMalloc(&own_, bytes), "heap_bytes: the symmetric heap");
    // Zeroed on a stream of its own and waited for: a memset on the legacy stream would not be
    // ordered before the ops that later run on callers' non-blocking streams.
    void* zeroing = nullptr;
    requireGpu(gpu::streamCreateNonBlocking(&zeroing), "creating a stream to zero the heap's control area");
    const gpu::Outcome zeroed = gpu::zeroDeviceNow(own_, zeroBytes, zeroing, 10.0);
    gpu::streamDestroy(zeroing);
    requireGpu(zeroed, "zeroing the heap's control area");
    gpu::IpcHandle mine{};
    requireGpu(gpu::ipcExport(&mine, own_), "exporting the heap to local peers");
    std::vector<gpu::IpcHandle> all(n);
    ex.allGather(&mine, sizeof mine, all.data());
    bases_.assign(n, nullptr);
    imported_.assign(n, nullptr);
    for (int r = 0; r < n; ++r) {
      if (r == me) {
        bases_[r] = static_cast<uint8_t*>(own_);
        continue;
      }
      requireGpu(gpu::ipcImport(&imported_[r], all[r]), "mapping rank " + std::to_string(r) + "'s heap");
      bases_[r] = static_cast<uint8_t*>(imported_[r]);
    }
  } catch (...) {
    release();
    throw;
  }
}

DeviceHeap::~DeviceHeap() { release(); }

void DeviceHeap::release() {
  for (void* p : imported_)
    if (p) gpu::ipcClose(p);
  imported_.clear();
  if (own_) gpu::deviceFree(own_);
  own_ = nullptr;
}

}  // namespace weft::transport
