// The primitives device code is written in, one source for the CPU backend, CUDA and HIP: atomics
// with an explicit order and scope, fences, a clock, warp-wide operations and a polite spin. Flags
// are only ever touched through these atomics, so the CPU backend runs exactly the device protocol
// (and ThreadSanitizer can check it).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define WEFT_BACKEND_CUDA 1
#include <cuda/atomic>
#elif defined(__HIPCC__) || defined(__HIP__)
#define WEFT_BACKEND_HIP 1
#include <hip/hip_runtime.h>
#else
#define WEFT_BACKEND_CPU 1
#include <chrono>
#include <thread>
#endif

#if defined(WEFT_BACKEND_CPU)
#define WEFT_HOST_DEVICE inline
#define WEFT_DEVICE inline
#else
#define WEFT_HOST_DEVICE __host__ __device__ inline
#define WEFT_DEVICE __device__ inline
#endif

// Asks the device compiler to unroll the next loop (so that small arrays indexed by its counter
// stay in registers).
#if defined(WEFT_BACKEND_CPU)
#define WEFT_UNROLL
#else
#define WEFT_UNROLL _Pragma("unroll")
#endif

// A kernel parameter the kernel only reads, by address (CUDA: a tensor map must be one; every
// kernel's CommView is one, so that the out-of-line slow paths take it by address without a copy
// on the stack).
#if defined(WEFT_BACKEND_CUDA)
#define WEFT_GRID_CONSTANT __grid_constant__
#else
#define WEFT_GRID_CONSTANT
#endif

// A kernel's bound on its block size, where one matters to the compiler: HIP's sizes a kernel's
// registers for 1024-thread blocks unless told otherwise, which caps a lane at 128 VGPRs (on gfx90a
// the GEMV kernel spilled 662 of them to scratch). CUDA's ptxas already allows a thread 255
// registers, and the kernels' register use there is as measured (docs/archive/perf-journal-2026-11.md): unchanged.
#if defined(WEFT_BACKEND_HIP)
#define WEFT_BLOCK_BOUNDS __launch_bounds__(weft::prim::kBlockThreads)
#else
#define WEFT_BLOCK_BOUNDS
#endif

// True while compiling code that runs on a GPU (the device pass of nvcc/hipcc).
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define WEFT_DEVICE_PASS 1
#endif

// A function the GPU compiler must call rather than inline (after WEFT_HOST_DEVICE): code
// that runs once per item, which inlined into a kernel at its register limit costs it spills.
#if defined(WEFT_DEVICE_PASS)
#define WEFT_OUT_OF_LINE __noinline__
#else
#define WEFT_OUT_OF_LINE
#endif

// A function the GPU compiler must inline (after WEFT_HOST_DEVICE): an op's body in a kernel at
// its register limit, where a call costs the spills of every value live across it. Left to its
// own judgement, nvcc's inliner decides by the source it sees after the host compiler's
// preprocessor, so the same nvcc outlined the GEMV on one host's libstdc++ and not on another's.
#if defined(WEFT_DEVICE_PASS)
#define WEFT_INLINE __attribute__((always_inline))
#else
#define WEFT_INLINE
#endif

namespace weft::prim {

// Threads in a block of every weft kernel (runtime/backend_gpu.cpp launches them so).
constexpr int kBlockThreads = 256;

enum class Order { kRelaxed, kAcquire, kRelease, kAcqRel };
// kDevice: other workgroups of this GPU; kSystem: peers (other GPUs, the host, other processes).
enum class Scope { kDevice, kSystem };

#if defined(WEFT_BACKEND_CPU)
constexpr int gccOrder(Order o) {
  return o == Order::kRelaxed   ? __ATOMIC_RELAXED
         : o == Order::kAcquire ? __ATOMIC_ACQUIRE
         : o == Order::kRelease ? __ATOMIC_RELEASE
                                : __ATOMIC_ACQ_REL;
}
template <Order O, Scope S = Scope::kSystem, typename T>
inline T atomicLoad(const T* p) {
  return __atomic_load_n(p, gccOrder(O));
}
template <Order O, Scope S = Scope::kSystem, typename T>
inline void atomicStore(T* p, T v) {
  __atomic_store_n(p, v, gccOrder(O));
}
template <Order O, Scope S = Scope::kSystem, typename T>
inline T atomicFetchAdd(T* p, T v) {
  return __atomic_fetch_add(p, v, gccOrder(O));
}
// Strong compare-and-swap; on failure `expected` receives the value seen.
template <Order O, Scope S = Scope::kSystem, typename T>
inline bool atomicCas(T* p, T& expected, T desired) {
  return __atomic_compare_exchange_n(p, &expected, desired, false, gccOrder(O), __ATOMIC_RELAXED);
}
#elif defined(WEFT_BACKEND_CUDA)
constexpr cuda::memory_order cudaOrder(Order o) {
  return o == Order::kRelaxed   ? cuda::memory_order_relaxed
         : o == Order::kAcquire ? cuda::memory_order_acquire
         : o == Order::kRelease ? cuda::memory_order_release
                                : cuda::memory_order_acq_rel;
}
template <Scope S>
using CudaScope = std::integral_constant<cuda::thread_scope,
                                         S == Scope::kSystem ? cuda::thread_scope_system : cuda::thread_scope_device>;
template <Order O, Scope S = Scope::kSystem, typename T>
__host__ __device__ inline T atomicLoad(const T* p) {
  return cuda::atomic_ref<T, CudaScope<S>::value>(*const_cast<T*>(p)).load(cudaOrder(O));
}
template <Order O, Scope S = Scope::kSystem, typename T>
__host__ __device__ inline void atomicStore(T* p, T v) {
  cuda::atomic_ref<T, CudaScope<S>::value>(*p).store(v, cudaOrder(O));
}
template <Order O, Scope S = Scope::kSystem, typename T>
__host__ __device__ inline T atomicFetchAdd(T* p, T v) {
  return cuda::atomic_ref<T, CudaScope<S>::value>(*p).fetch_add(v, cudaOrder(O));
}
template <Order O, Scope S = Scope::kSystem, typename T>
__host__ __device__ inline bool atomicCas(T* p, T& expected, T desired) {
  return cuda::atomic_ref<T, CudaScope<S>::value>(*p).compare_exchange_strong(expected, desired, cudaOrder(O),
                                                                              cuda::memory_order_relaxed);
}
#else  // HIP
constexpr int hipOrder(Order o) {
  return o == Order::kRelaxed   ? __ATOMIC_RELAXED
         : o == Order::kAcquire ? __ATOMIC_ACQUIRE
         : o == Order::kRelease ? __ATOMIC_RELEASE
                                : __ATOMIC_ACQ_REL;
}
constexpr int hipScope(Scope s) { return s == Scope::kSystem ? __HIP_MEMORY_SCOPE_SYSTEM : __HIP_MEMORY_SCOPE_AGENT; }
template <Order O, Scope S = Scope::kSystem, typename T>
__host__ __device__ inline T atomicLoad(const T* p) {
  return __hip_atomic_load(p, hipOrder(O), hipScope(S));
}
template <Order O, Scope S = Scope::kSystem, typename T>
__host__ __device__ inline void atomicStore(T* p, T v) {
  __hip_atomic_store(p, v, hipOrder(O), hipScope(S));
}
template <Order O, Scope S = Scope::kSystem, typename T>
__host__ __device__ inline T atomicFetchAdd(T* p, T v) {
  return __hip_atomic_fetch_add(p, v, hipOrder(O), hipScope(S));
}
template <Order O, Scope S = Scope::kSystem, typename T>
__host__ __device__ inline bool atomicCas(T* p, T& expected, T desired) {
  return __hip_atomic_compare_exchange_strong(p, &expected, desired, hipOrder(O), __ATOMIC_RELAXED, hipScope(S));
}
#endif

// A full fence at system scope (Dekker-style handshakes with the host).
WEFT_HOST_DEVICE void fenceSeqCst() {
#if defined(WEFT_BACKEND_CPU)
  // ThreadSanitizer does not model fences, and GCC warns so at every use (-Wtsan). The fence stays
  // (the hardware needs it); TSan treats it as nothing, and the handshakes it orders are signals
  // the annotations below already model.
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#elif defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA)
  cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
#elif defined(WEFT_DEVICE_PASS)
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

// ThreadSanitizer sees only one process. On the CPU backend, signals between ranks are
// synchronisation through another process's stores, invisible to it; these annotations model every
// cross-process signal as a release/acquire on one shared object, so it neither reports the
// resulting happens-before as races nor loses the checking of everything else.
#if defined(WEFT_BACKEND_CPU) && defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
inline char gCrossProcessSync;
inline void crossProcessRelease() { __tsan_release(&gCrossProcessSync); }
inline void crossProcessAcquire() { __tsan_acquire(&gCrossProcessSync); }
#else
WEFT_HOST_DEVICE void crossProcessRelease() {}
WEFT_HOST_DEVICE void crossProcessAcquire() {}
#endif

// Monotonic time in nanoseconds, comparable across the workgroups of one device.
WEFT_HOST_DEVICE uint64_t nowNs() {
#if defined(WEFT_BACKEND_CPU)
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
#elif defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#elif defined(WEFT_DEVICE_PASS)
  return static_cast<uint64_t>(wall_clock64()) * 10;  // 100 MHz constant clock on gfx90a
#else
  return 0;  // never called from host code of a GPU build
#endif
}

// Threads that run in lockstep and reduce by shuffles: a CUDA warp, a HIP wavefront (gfx90a), or
// one CPU thread.
#if defined(WEFT_BACKEND_CPU)
constexpr int kWarpSize = 1;
#elif defined(WEFT_BACKEND_CUDA)
constexpr int kWarpSize = 32;
#else
constexpr int kWarpSize = 64;
#endif

// The sum of v over the threads of a warp, in every thread.
WEFT_HOST_DEVICE float warpSum(float v) {
#if defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA)
  for (int m = kWarpSize / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
#elif defined(WEFT_DEVICE_PASS)
  for (int m = kWarpSize / 2; m > 0; m >>= 1) v += __shfl_xor(v, m);
#endif
  return v;
}

// Warp-collective helpers: every thread of the warp calls them together (CPU: a warp of one).
// Whether v holds in every thread of the warp.
WEFT_HOST_DEVICE bool warpAll(bool v) {
#if defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA)
  return __all_sync(0xffffffffu, v) != 0;
#elif defined(WEFT_DEVICE_PASS)
  return __all(v) != 0;
#else
  return v;
#endif
}
// Thread `from`'s v, in every thread.
WEFT_HOST_DEVICE uint32_t warpBroadcast(uint32_t v, int from) {
#if defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA)
  return __shfl_sync(0xffffffffu, v, from);
#elif defined(WEFT_DEVICE_PASS)
  return static_cast<uint32_t>(__shfl(static_cast<int>(v), from));
#else
  (void)from;
  return v;
#endif
}
// The lowest thread of the warp where v holds, or -1.
WEFT_HOST_DEVICE int warpFirst(bool v) {
#if defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA)
  return __ffs(__ballot_sync(0xffffffffu, v)) - 1;
#elif defined(WEFT_DEVICE_PASS)
  return __ffsll(static_cast<unsigned long long>(__ballot(v))) - 1;
#else
  return v ? 0 : -1;
#endif
}
// Reconverges the warp (before stores whose lanes must go out in one instruction).
WEFT_HOST_DEVICE void warpSync() {
#if defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA)
  __syncwarp();
#endif
}

// The poll from which relax() sleeps on the CPU backend (runtime/work_queue.cpp's caller wait
// lowers its thread's timer slack from there).
constexpr uint32_t kRelaxSleepsFrom = 256;
// Back-off inside a polling loop; `spins` counts the polls so far. On the CPU backend the
// workers of several ranks share few cores, so polling escalates from a pause to a sleep.
WEFT_HOST_DEVICE void relax(uint32_t spins) {
#if defined(WEFT_BACKEND_CPU)
  if (spins < 64) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  } else if (spins < kRelaxSleepsFrom) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 4096 ? 20 : 200));
  }
#elif defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA)
  if (spins > 32) __nanosleep(spins < 1024 ? 64 : 512);
#elif defined(WEFT_DEVICE_PASS)
  if (spins > 1024)
    __builtin_amdgcn_s_sleep(8);
  else if (spins > 32)
    __builtin_amdgcn_s_sleep(1);
#endif
}

}  // namespace weft::prim
