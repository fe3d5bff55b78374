// The GPU backends' p2p path: each rank's symmetric heap is device memory, exported by an IPC
// handle (CUDA or HIP, device/gpu_host.hpp) and mapped by every other rank of the node. GPU builds
// only; a job with proxy peers keeps its heap in host memory instead (peers.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "transport/net/backend.hpp"

namespace weft::transport {

class DeviceHeap {
 public:
  // Collective over `ex`: allocates `bytes` of device memory, zeroes its first `zeroBytes` (the
  // control area peers signal into) before any peer can reach it, exports it and maps every
  // peer's. Throws weft::Error naming what failed; what was made is released.
  DeviceHeap(Exchange& ex, uint64_t bytes, uint64_t zeroBytes);
  ~DeviceHeap();
  DeviceHeap(const DeviceHeap&) = delete;
  DeviceHeap& operator=(const DeviceHeap&) = delete;

  // Rank r's heap as this process's device addresses it.
  uint8_t* base(int rank) const { return bases_[rank]; }

 private:
  void release();

  void* own_ = nullptr;
  std::vector<void*> imported_;
  std::vector<uint8_t*> bases_;
};

}  // namespace weft::transport
