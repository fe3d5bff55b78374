// Service mode with weftd's GPU engine: a descriptor's pointers as weftd sees them. A pointer into
// the symmetric heap becomes the same offset in weftd's view of the heap; a pointer into other
// device memory of the rank becomes the same offset in weftd's mapping of its allocation, which
// weftd makes at the first op that reads it (one round trip) and keeps, so that a steady-state
// op costs no call to weftd. The cache goes by the driver's id of an allocation, which a later
// allocation at the same address does not share. Where a size is known (every op but the
// embedding's contents-sized inputs), the range must lie in its allocation. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "client.hpp"
#include "device/queue_device.hpp"

namespace weft::service {

class WeftdInputs {
 public:
  // `heap`/`heapBytes`: this rank's heap here; `weftdHeap`: where weftd maps it. `daemon` outlives
  // this object.
  WeftdInputs(Client& daemon, const uint8_t* heap, uint64_t heapBytes, uint64_t weftdHeap);

  // Rewrites the input pointers of `d` (an op for weftd's queue; not the GEMM, whose kernel runs
  // in the rank) for `nranks` ranks. Throws weft::Error (kInvalidArgument) naming an input weftd
  // cannot map or whose range leaves its allocation; `d` is then unchanged.
  void prepare(dev::OpDesc& d, int nranks);

 private:
  // weftd's address for [ptr, ptr + bytes) (bytes 0: unknown), 0 for a null pointer.
  uint64_t place(uint64_t ptr, uint64_t bytes, const char* arg);

  struct Mapped {
    uint64_t base, size, weftd;
  };
  Client& daemon_;
  const uint8_t* heap_;
  uint64_t heapBytes_, weftdHeap_;
  std::mutex mutex_;
  std::unordered_map<uint64_t, Mapped> byId_;
};

}  // namespace weft::service
