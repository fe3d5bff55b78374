// Deterministic first-fit allocator over the user part of the symmetric heap. Every rank runs the
// same sequence of calls, so every rank gets the same offsets; Comm checks that they agree.
// Not thread-safe (the heap serialises calls).
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace weft {

class HeapAllocator {
 public:
  static constexpr uint64_t kAlign = 256;

  HeapAllocator(uint64_t begin, uint64_t end);

  // Offset of a new block of at least `bytes` (rounded up to kAlign), or nothing if no free block fits.
  std::optional<uint64_t> allocate(uint64_t bytes);
  // Frees the block starting at `offset`; false if no block starts there.
  bool release(uint64_t offset);
  // Start of the live block whose requested bytes hold all of [offset, offset + bytes), if any.
  std::optional<uint64_t> blockHolding(uint64_t offset, uint64_t bytes) const;

  uint64_t freeBytes() const;
  uint64_t largestFree() const;
  size_t liveBlocks() const { return used_.size(); }

 private:
  struct Block {
    uint64_t size;       // rounded up to kAlign
    uint64_t requested;  // what the caller asked for: the bound of buffer checks
  };
  std::map<uint64_t, Block> used_;     // offset -> block
  std::map<uint64_t, uint64_t> free_;  // offset -> size, coalesced
};

}  // namespace weft
