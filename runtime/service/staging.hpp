// Service mode with weftd's engine: a descriptor's pointers as weftd sees them. An input in the
// symmetric heap is rewritten to weftd's view of the heap; any other input is copied into the
// staging segment (shared with weftd) and rewritten to weftd's view of that; an output outside the
// heap (the GEMM's recv_counts) is staged and copied back once the op has succeeded. The CPU
// backend's "device memory" is the rank's private memory, which weftd cannot read otherwise.
// Not thread-safe: the communicator holds one op at a time in it.
#pragma once

#include <cstdint>
#include <vector>

#include "device/queue_device.hpp"
#include "transport/p2p/shm_segment.hpp"

namespace weft::service {

class Staging {
 public:
  // `heap`/`heapBytes`: this rank's heap segment here; `weftdHeap`, `weftdStaging`: where weftd
  // maps the heap and `segment`.
  Staging(transport::ShmSegment segment, uint64_t weftdStaging, const uint8_t* heap, uint64_t heapBytes,
          uint64_t weftdHeap);

  // Rewrites the pointers of `d` (as the communicator packed it, for `nranks` ranks), copying
  // inputs into the segment. Throws weft::Error (kInvalidArgument) naming an input that does not
  // fit the segment or whose sizes (read from the caller's memory) are negative.
  void prepare(dev::OpDesc& d, int nranks);
  // After the op succeeded: copies the staged outputs back to the caller's memory.
  void finish();

 private:
  // weftd's address for [ptr, ptr + bytes) of this process (0 for an empty or null range).
  uint64_t place(uint64_t ptr, uint64_t bytes, const char* arg, bool output);

  struct Output {
    void* to;
    uint64_t offset, bytes;
  };
  transport::ShmSegment segment_;
  uint64_t weftdStaging_;
  const uint8_t* heap_;
  uint64_t heapBytes_;
  uint64_t weftdHeap_;
  uint64_t used_ = 0;
  std::vector<Output> outputs_;
};

}  // namespace weft::service
