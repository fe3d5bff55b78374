#include "heap.hpp"

#include "common/error.hpp"
#include "common/log.hpp"

namespace weft {

SymmetricHeap::SymmetricHeap(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes,
                             const dev::HeapLayout& layout, const transport::ProxyOptions& proxy)
    : rank_(boot.rank()),
      bytes_(layout.controlBytes() + bytes),
      mem_(boot, paths, bytes_, layout.controlBytes(), proxy),
      alloc_(layout.controlBytes(), bytes_) {
  WEFT_LOG(kInfo, kHeap, "heap of {} bytes after a control area of {} bytes", bytes, layout.controlBytes());
}

SymmetricHeap::SymmetricHeap(int rank, const std::vector<int>& fds, uint64_t bytes, const dev::HeapLayout& layout)
    : rank_(rank),
      bytes_(layout.controlBytes() + bytes),
      mem_(rank, fds, layout.controlBytes() + bytes),
      alloc_(layout.controlBytes(), bytes_) {
  WEFT_LOG(kInfo, kHeap, "heap of {} bytes after a control area of {} bytes, made by weftd", bytes,
           layout.controlBytes());
}

std::optional<uint64_t> SymmetricHeap::allocate(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  return alloc_.allocate(bytes);
}

bool SymmetricHeap::release(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  return alloc_.release(offset);
}

std::optional<uint64_t> SymmetricHeap::offsetInBlock(const void* p, uint64_t bytes) const {
  if (!overlaps(p, 1)) return std::nullopt;
  const uint64_t off = static_cast<uint64_t>(static_cast<const uint8_t*>(p) - base(rank_));
  std::lock_guard<std::mutex> lock(mutex_);
  if (!alloc_.blockHolding(off, bytes)) return std::nullopt;
  return off;
}

bool SymmetricHeap::overlaps(const void* p, uint64_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto lo = reinterpret_cast<uintptr_t>(base(rank_));
  const uintptr_t hi = lo + bytes_;
  return bytes > 0 && a < hi && (a >= lo || lo - a < bytes);
}

uint64_t SymmetricHeap::freeBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return alloc_.freeBytes();
}

}  // namespace weft
