// The vendor's names (CUDA or HIP, chosen at build time) for the implementation files of
// device/gpu only: never included by a header outside this folder, so that nothing else of weft
// sees a vendor type.
#pragma once

#include <cstring>
#include <string>

#include "../gpu_host.hpp"

#if defined(WEFT_BACKEND_CUDA)
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#define GPU(name) cuda##name
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuIpcMemHandle_t = cudaIpcMemHandle_t;
using gpuDeviceProp_t = cudaDeviceProp;
using gpuFuncAttributes = cudaFuncAttributes;
constexpr gpuError_t kGpuSuccess = cudaSuccess;
constexpr gpuError_t kGpuNotReady = cudaErrorNotReady;
constexpr gpuError_t kGpuOom = cudaErrorMemoryAllocation;
constexpr gpuError_t kGpuUnloading = cudaErrorCudartUnloading;
#else
#include <hip/hip_runtime.h>
#define GPU(name) hip##name
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuIpcMemHandle_t = hipIpcMemHandle_t;
using gpuDeviceProp_t = hipDeviceProp_t;
using gpuFuncAttributes = hipFuncAttributes;
constexpr gpuError_t kGpuSuccess = hipSuccess;
constexpr gpuError_t kGpuNotReady = hipErrorNotReady;
constexpr gpuError_t kGpuOom = hipErrorOutOfMemory;
constexpr gpuError_t kGpuUnloading = hipErrorDeinitialized;
#endif

namespace weft::gpu {

static_assert(sizeof(gpuIpcMemHandle_t) <= sizeof(IpcHandle));

// The Outcome of a runtime call: empty on success, else the call and the runtime's words.
inline Outcome check(gpuError_t e, const char* call) {
  if (e == kGpuSuccess) return {};
  Outcome o;
  o.fault = e == kGpuOom ? Fault::kOutOfMemory : e == kGpuUnloading ? Fault::kShuttingDown : Fault::kOther;
  o.message = std::string(call) + ": " + GPU(GetErrorName)(e) + " (" + GPU(GetErrorString)(e) + ")";
  (void)GPU(GetLastError)();  // clear the sticky last error so that later calls report their own
  return o;
}

#if defined(WEFT_BACKEND_CUDA)
// The same for a driver API call.
inline Outcome checkDriver(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return {};
  Outcome o;
  o.fault = r == CUDA_ERROR_NOT_SUPPORTED ? Fault::kNotSupported : Fault::kOther;
  o.message = std::string(call) + ": CUresult " + std::to_string(static_cast<int>(r));
  return o;
}
#endif

#if defined(WEFT_BACKEND_CUDA)
// The stream memory operations and the virtual memory calls live in the driver API. They are
// fetched through the runtime, so that nothing links libcuda and the programs still load (and skip their GPU work)
// where no driver is installed.
template <typename Fn>
struct DriverEntry {
  Fn fn = nullptr;
  Outcome status;
};

template <typename Fn>
inline DriverEntry<Fn> driverEntry(const char* symbol) {
  static_assert(sizeof(Fn) == sizeof(void*));
  DriverEntry<Fn> e;
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  e.status = check(cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &q),
                   "cudaGetDriverEntryPointByVersion");
  if (e.status && (q != cudaDriverEntryPointSuccess || !p))
    e.status = Outcome{Fault::kNotSupported, std::string("the driver has no ") + symbol};
  if (e.status) memcpy(&e.fn, &p, sizeof p);
  return e;
}
#endif

}  // namespace weft::gpu
