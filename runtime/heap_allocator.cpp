#include "heap_allocator.hpp"

#include <algorithm>
#include <iterator>

namespace weft {

HeapAllocator::HeapAllocator(uint64_t begin, uint64_t end) {
  begin = (begin + kAlign - 1) / kAlign * kAlign;
  if (end > begin) free_[begin] = end - begin;
}

std::optional<uint64_t> HeapAllocator::allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > UINT64_MAX - kAlign) return std::nullopt;
  const uint64_t size = (bytes + kAlign - 1) / kAlign * kAlign;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const uint64_t off = it->first;
    const uint64_t left = it->second - size;
    free_.erase(it);
    if (left) free_[off + size] = left;
    used_[off] = Block{size, bytes};
    return off;
  }
  return std::nullopt;
}

bool HeapAllocator::release(uint64_t offset) {
  auto u = used_.find(offset);
  if (u == used_.end()) return false;
  uint64_t off = u->first, size = u->second.size;
  used_.erase(u);
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += size;
      return true;
    }
  }
  free_[off] = size;
  return true;
}

std::optional<uint64_t> HeapAllocator::blockHolding(uint64_t offset, uint64_t bytes) const {
  auto it = used_.upper_bound(offset);
  if (it == used_.begin()) return std::nullopt;
  --it;
  const uint64_t into = offset - it->first, len = it->second.requested;
  if (into >= len || bytes > len - into) return std::nullopt;
  return it->first;
}

uint64_t HeapAllocator::freeBytes() const {
  uint64_t total = 0;
  for (const auto& [off, size] : free_) total += size;
  return total;
}

uint64_t HeapAllocator::largestFree() const {
  uint64_t best = 0;
  for (const auto& [off, size] : free_) best = std::max(best, size);
  return best;
}

}  // namespace weft
