// The symmetric heap: one segment of the same size per rank, mapped by every local rank, so a
// buffer has the same offset everywhere and a peer's copy is base(peer) + offset. The front of
// each segment is the control area (device/heap_layout_device.hpp); user blocks follow. Where the
// memory lives (shared memory, device memory) is the backend's HeapMemory.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "backend.hpp"
#include "device/heap_layout_device.hpp"
#include "heap_allocator.hpp"

namespace weft {

class SymmetricHeap {
 public:
  // Collective over the bootstrap: `bytes` for weft_mem_alloc, after the layout's control area.
  // Throws weft::Error.
  SymmetricHeap(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes,
                const dev::HeapLayout& layout, const transport::ProxyOptions& proxy);
  // Over every rank's segment, made by weftd and mapped here (service mode).
  SymmetricHeap(int rank, const std::vector<int>& fds, uint64_t bytes, const dev::HeapLayout& layout);

  uint8_t* const* engineBases() const { return mem_.engineBases(); }
  uint8_t* base(int rank) const { return mem_.base(rank); }
  transport::Proxy* proxy() const { return mem_.proxy(); }

  // Local part of the collective allocation: same offsets on every rank for the same call sequence.
  std::optional<uint64_t> allocate(uint64_t bytes);
  bool release(uint64_t offset);
  // Offset of `p` if [p, p + bytes) lies in one live block of this rank's heap.
  std::optional<uint64_t> offsetInBlock(const void* p, uint64_t bytes) const;
  // Whether [p, p + bytes) overlaps this rank's heap at all.
  bool overlaps(const void* p, uint64_t bytes) const;
  uint64_t freeBytes() const;
  // Bytes of every rank's segment, the control area included.
  uint64_t segmentBytes() const { return bytes_; }

 private:
  const int rank_;
  const uint64_t bytes_;  // control area included
  HeapMemory mem_;
  mutable std::mutex mutex_;
  HeapAllocator alloc_;
};

}  // namespace weft
