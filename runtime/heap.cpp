#include "heap.hpp"

#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"

namespace weft {

namespace {

struct SegmentInfo {
  char name[96];
  uint64_t bytes;
};

}  // namespace

SymmetricHeap::SymmetricHeap(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes,
                             const dev::HeapLayout& layout)
    : bytes_(bytes), alloc_(layout.controlBytes(), bytes) {
  const int n = boot.nranks(), me = boot.rank();
  if (layout.controlBytes() >= bytes)
    throw Error(Code::kInvalidArgument, "heap_bytes: " + std::to_string(bytes) + " leaves no room after the " +
                                            std::to_string(layout.controlBytes()) + "-byte control area");
  for (int r = 0; r < n; ++r)
    if (paths[r] == transport::Path::kProxy)
      throw Error(Code::kNotSupported, "rank " + std::to_string(r) +
                                           " needs the proxy transport (another host, or transport=proxy), which "
                                           "this build does not provide yet");
  own_ = transport::ShmSegment::create(transport::ShmSegment::uniqueName("heap" + std::to_string(me)), bytes);
  SegmentInfo mine{};
  snprintf(mine.name, sizeof mine.name, "%s", own_.name().c_str());
  mine.bytes = bytes;
  std::vector<SegmentInfo> all(n);
  boot.allGather(&mine, sizeof mine, all.data());
  bases_.assign(n, nullptr);
  for (int r = 0; r < n; ++r) {
    if (all[r].bytes != bytes)
      throw Error(Code::kInvalidUsage, "heap_bytes: rank " + std::to_string(r) + " uses " +
                                           std::to_string(all[r].bytes) + ", this rank " + std::to_string(bytes) +
                                           "; every rank needs the same heap size");
    if (r == me) {
      bases_[r] = static_cast<uint8_t*>(own_.data());
      continue;
    }
    all[r].name[sizeof all[r].name - 1] = '\0';
    peers_.push_back(transport::ShmSegment::open(all[r].name, bytes));
    bases_[r] = static_cast<uint8_t*>(peers_.back().data());
  }
  // Every rank has mapped every segment: the names can go.
  boot.barrier();
  own_.unlink();
  WEFT_LOG(kInfo, kHeap, "heap of {} bytes, control area {} bytes, mapped {} peer(s)", bytes, layout.controlBytes(),
           peers_.size());
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
  const uint64_t off = static_cast<uint64_t>(static_cast<const uint8_t*>(p) - static_cast<const uint8_t*>(own_.data()));
  std::lock_guard<std::mutex> lock(mutex_);
  if (!alloc_.blockHolding(off, bytes)) return std::nullopt;
  return off;
}

bool SymmetricHeap::overlaps(const void* p, uint64_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto lo = reinterpret_cast<uintptr_t>(own_.data());
  const uintptr_t hi = lo + bytes_;
  return bytes > 0 && a < hi && (a >= lo || lo - a < bytes);
}

uint64_t SymmetricHeap::freeBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return alloc_.freeBytes();
}

}  // namespace weft
