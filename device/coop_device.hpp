// The group of threads that cooperates on one tile. Helpers take it as a parameter so that the
// same tile code runs as a CUDA/HIP thread block or as one CPU thread.
#pragma once

#include "gpu.hpp"

namespace weft::dev {

#if defined(WEFT_BACKEND_CPU)
// One OS thread: the leader of itself.
struct SoloCoop {
  int rank() const { return 0; }
  int size() const { return 1; }
  bool leader() const { return true; }
  void sync() const {}
  bool any(bool v) const { return v; }
  template <typename T>
  T broadcast(T v) const {
    return v;
  }
};
using WorkerCoop = SoloCoop;
#else
// A whole thread block; `scratch` is 8 bytes of block-shared memory for broadcasts.
struct BlockCoop {
  unsigned long long* scratch;
  __device__ int rank() const { return threadIdx.x; }
  __device__ int size() const { return blockDim.x; }
  __device__ bool leader() const { return threadIdx.x == 0; }
  __device__ void sync() const { __syncthreads(); }
  // True for every thread if it was true for any (a barrier).
  __device__ bool any(bool v) const { return __syncthreads_or(v) != 0; }
  // The leader's value, seen by every thread.
  template <typename T>
  __device__ T broadcast(T v) const {
    static_assert(sizeof(T) <= sizeof(unsigned long long));
    __syncthreads();
    if (leader()) *reinterpret_cast<T*>(scratch) = v;
    __syncthreads();
    T out = *reinterpret_cast<T*>(scratch);
    return out;
  }
};
using WorkerCoop = BlockCoop;
#endif

}  // namespace weft::dev
