// The group of threads that cooperates on one tile. Helpers take it as a parameter so that the
// same tile code runs as a CUDA/HIP thread block or as one CPU thread.
#pragma once

#include <cstring>

#include "primitives_device.hpp"

namespace weft::dev {

// Floats of group-shared scratch every group has (16 KB: block-shared memory on a GPU).
constexpr int kCoopFloats = 4096;

#if defined(WEFT_BACKEND_CPU)
// One OS thread: the leader of itself, one warp of one lane.
struct SoloCoop {
  mutable float tile[kCoopFloats];
  int rank() const { return 0; }
  int size() const { return 1; }
  int lane() const { return 0; }
  int warp() const { return 0; }
  int warps() const { return 1; }
  float* floats() const { return tile; }
  bool leader() const { return true; }
  void sync() const {}
  bool any(bool v) const { return v; }
  template <typename T>
  T broadcast(T v) const {
    return v;
  }
  template <typename T, typename F>
  T fromLeader(F&& f) const {
    return f();
  }
};
using WorkerCoop = SoloCoop;
#else
// A whole thread block; `scratch` is 8 bytes of block-shared memory for broadcasts, `tile`
// kCoopFloats of it for the group's data.
struct BlockCoop {
  unsigned long long* scratch;
  float* tile;
  __device__ int rank() const { return threadIdx.x; }
  __device__ int size() const { return blockDim.x; }
  __device__ int lane() const { return threadIdx.x % prim::kWarpSize; }
  __device__ int warp() const { return threadIdx.x / prim::kWarpSize; }
  __device__ int warps() const { return blockDim.x / prim::kWarpSize; }
  __device__ float* floats() const { return tile; }
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
  // f() run by the leader alone, its result seen by every thread (through the tile, which must be
  // free). For reads of words every block reads: a thousand warps loading the same line queue on
  // one L2 slice (it cost launched ops ~4 us at their start).
  template <typename T, typename F>
  __device__ T fromLeader(F&& f) const {
    static_assert(sizeof(T) <= sizeof(float) * kCoopFloats);
    __syncthreads();
    if (leader()) {
      const T v = f();
      memcpy(tile, &v, sizeof v);
    }
    __syncthreads();
    T out;
    memcpy(&out, tile, sizeof out);
    __syncthreads();  // the tile is the caller's again
    return out;
  }
};
using WorkerCoop = BlockCoop;
#endif

}  // namespace weft::dev
