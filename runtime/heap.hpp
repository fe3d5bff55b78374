// The symmetric heap: one segment of the same size per rank, mapped by every local rank, so a
// buffer has the same offset everywhere and a peer's copy is heap(peer) + offset. The front of
// each segment is the control area (device/heap_layout_device.hpp); user blocks follow.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "bootstrap.hpp"
#include "device/heap_layout_device.hpp"
#include "heap_allocator.hpp"
#include "transport/p2p/shm_segment.hpp"
#include "transport/path.hpp"

namespace weft {

class SymmetricHeap {
 public:
  // Collective over the bootstrap: creates this rank's segment, maps every p2p peer's, and unlinks
  // the names once all are mapped. Throws weft::Error (kNotSupported for a proxy peer until the
  // proxy transport exists).
  SymmetricHeap(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes,
                const dev::HeapLayout& layout);

  uint8_t* const* bases() const { return bases_.data(); }
  uint8_t* base(int rank) const { return bases_[rank]; }
  uint64_t bytes() const { return bytes_; }

  // Local part of the collective allocation: same offsets on every rank for the same call sequence.
  std::optional<uint64_t> allocate(uint64_t bytes);
  bool release(uint64_t offset);
  // Offset of `p` if [p, p + bytes) lies in one live block of this rank's heap.
  std::optional<uint64_t> offsetInBlock(const void* p, uint64_t bytes) const;
  // Whether [p, p + bytes) overlaps this rank's heap at all.
  bool overlaps(const void* p, uint64_t bytes) const;
  uint64_t freeBytes() const;

 private:
  uint64_t bytes_;
  transport::ShmSegment own_;
  std::vector<transport::ShmSegment> peers_;
  std::vector<uint8_t*> bases_;
  mutable std::mutex mutex_;
  HeapAllocator alloc_;
};

}  // namespace weft
