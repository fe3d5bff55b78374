// weft::gpu host calls for CUDA and HIP. The vendor names are aliased here, in this one
// implementation file, never in a header.
#include <chrono>
#include <cstring>
#include <thread>

#include "../gpu_host.hpp"
#include "persistent_kernel.hpp"

#if defined(WEFT_BACKEND_CUDA)
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#define GPU(name) cuda##name
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuIpcMemHandle_t = cudaIpcMemHandle_t;
using gpuDeviceProp_t = cudaDeviceProp;
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
constexpr gpuError_t kGpuSuccess = hipSuccess;
constexpr gpuError_t kGpuNotReady = hipErrorNotReady;
constexpr gpuError_t kGpuOom = hipErrorOutOfMemory;
constexpr gpuError_t kGpuUnloading = hipErrorDeinitialized;
#endif

namespace weft::gpu {

namespace {

static_assert(sizeof(gpuIpcMemHandle_t) <= sizeof(IpcHandle));

Outcome check(gpuError_t e, const char* call) {
  if (e == kGpuSuccess) return {};
  Outcome o;
  o.fault = e == kGpuOom ? Fault::kOutOfMemory : e == kGpuUnloading ? Fault::kShuttingDown : Fault::kOther;
  o.message = std::string(call) + ": " + GPU(GetErrorName)(e) + " (" + GPU(GetErrorString)(e) + ")";
  (void)GPU(GetLastError)();  // clear the sticky last error so that later calls report their own
  return o;
}

#if defined(WEFT_BACKEND_CUDA)
Outcome checkDriver(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return {};
  Outcome o;
  o.fault = r == CUDA_ERROR_NOT_SUPPORTED ? Fault::kNotSupported : Fault::kOther;
  o.message = std::string(call) + ": CUresult " + std::to_string(static_cast<int>(r));
  return o;
}
#endif

}  // namespace

Outcome deviceCount(int* count) { return check(GPU(GetDeviceCount)(count), "GetDeviceCount"); }
Outcome currentDevice(int* device) { return check(GPU(GetDevice)(device), "GetDevice"); }

Outcome deviceName(int device, std::string* name) {
  gpuDeviceProp_t prop{};
  Outcome o = check(GPU(GetDeviceProperties)(&prop, device), "GetDeviceProperties");
  if (o) *name = prop.name;
  return o;
}

Outcome deviceMalloc(void** ptr, size_t bytes) {
  return check(GPU(Malloc)(ptr, bytes), ("Malloc(" + std::to_string(bytes) + ")").c_str());
}
Outcome deviceFree(void* ptr) { return check(GPU(Free)(ptr), "Free"); }
Outcome memsetDevice(void* ptr, int value, size_t bytes) { return check(GPU(Memset)(ptr, value, bytes), "Memset"); }
Outcome copyToDevice(void* dst, const void* src, size_t bytes) {
  return check(GPU(Memcpy)(dst, src, bytes, GPU(MemcpyHostToDevice)), "Memcpy");
}

Outcome copyToDeviceAsync(void* dst, const void* src, size_t bytes, void* stream) {
  return check(GPU(MemcpyAsync)(dst, src, bytes, GPU(MemcpyDefault), static_cast<gpuStream_t>(stream)), "MemcpyAsync");
}

Outcome ipcExport(IpcHandle* handle, void* ptr) {
  gpuIpcMemHandle_t h;
  Outcome o = check(GPU(IpcGetMemHandle)(&h, ptr), "IpcGetMemHandle");
  if (o) memcpy(handle->bytes, &h, sizeof h);
  return o;
}

Outcome ipcImport(void** ptr, const IpcHandle& handle) {
  gpuIpcMemHandle_t h;
  memcpy(&h, handle.bytes, sizeof h);
  return check(GPU(IpcOpenMemHandle)(ptr, h, GPU(IpcMemLazyEnablePeerAccess)), "IpcOpenMemHandle");
}
Outcome ipcClose(void* ptr) { return check(GPU(IpcCloseMemHandle)(ptr), "IpcCloseMemHandle"); }

Outcome hostRegister(void* ptr, size_t bytes, void** devicePtr) {
  Outcome o = check(GPU(HostRegister)(ptr, bytes, GPU(HostRegisterMapped) | GPU(HostRegisterPortable)), "HostRegister");
  if (o) o = check(GPU(HostGetDevicePointer)(devicePtr, ptr, 0), "HostGetDevicePointer");
  return o;
}
Outcome hostUnregister(void* ptr) { return check(GPU(HostUnregister)(ptr), "HostUnregister"); }

Outcome streamCreateNonBlocking(void** stream) {
  gpuStream_t s;
  Outcome o = check(GPU(StreamCreateWithFlags)(&s, GPU(StreamNonBlocking)), "StreamCreateWithFlags");
  if (o) *stream = s;
  return o;
}
Outcome streamDestroy(void* stream) {
  return check(GPU(StreamDestroy)(static_cast<gpuStream_t>(stream)), "StreamDestroy");
}

Outcome streamDrain(void* stream, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    gpuError_t e = GPU(StreamQuery)(static_cast<gpuStream_t>(stream));
    if (e != kGpuNotReady) return check(e, "StreamQuery");
    if (std::chrono::steady_clock::now() > until) return Outcome{Fault::kOther, "stream still running"};
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Outcome eventDrain(void* event, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    gpuError_t e = GPU(EventQuery)(static_cast<GPU(Event_t)>(event));
    if (e != kGpuNotReady) return check(e, "EventQuery");
    if (std::chrono::steady_clock::now() > until) return Outcome{Fault::kOther, "event still pending"};
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Outcome streamIsCapturing(void* stream, bool* capturing) {
  GPU(StreamCaptureStatus) st;
  Outcome o = check(GPU(StreamIsCapturing)(static_cast<gpuStream_t>(stream), &st), "StreamIsCapturing");
  if (o) *capturing = st != GPU(StreamCaptureStatusNone);
  return o;
}

#if defined(WEFT_BACKEND_CUDA)
// The stream memory operations live in the driver API. They are fetched through the runtime, so
// that nothing links libcuda and the programs still load (and skip their GPU work) where no
// driver is installed.
template <typename Fn>
struct DriverEntry {
  Fn fn = nullptr;
  Outcome status;
};

template <typename Fn>
DriverEntry<Fn> driverEntry(const char* symbol) {
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

Outcome streamWriteValue(void* stream, uint64_t* addr, uint64_t value) {
  static const auto entry = driverEntry<PFN_cuStreamWriteValue64_v11070>("cuStreamWriteValue64");
  if (!entry.status) return entry.status;
  return checkDriver(entry.fn(static_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(addr), value,
                              CU_STREAM_WRITE_VALUE_DEFAULT),
                     "cuStreamWriteValue64");
}
Outcome streamWaitAtLeast(void* stream, uint64_t* addr, uint64_t value) {
  static const auto entry = driverEntry<PFN_cuStreamWaitValue64_v11070>("cuStreamWaitValue64");
  if (!entry.status) return entry.status;
  return checkDriver(
      entry.fn(static_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(addr), value, CU_STREAM_WAIT_VALUE_GEQ),
      "cuStreamWaitValue64");
}
#else
Outcome streamWriteValue(void* stream, uint64_t* addr, uint64_t value) {
  return check(hipStreamWriteValue64(static_cast<hipStream_t>(stream), addr, value, 0), "hipStreamWriteValue64");
}
Outcome streamWaitAtLeast(void* stream, uint64_t* addr, uint64_t value) {
  return check(hipStreamWaitValue64(static_cast<hipStream_t>(stream), addr, value, hipStreamWaitValueGte),
               "hipStreamWaitValue64");
}
#endif

Outcome launchPersistent(const dev::CommView& view, int blocks, int threads, void* stream, uint64_t firstTicket) {
  dev::persistentKernel<<<blocks, threads, 0, static_cast<gpuStream_t>(stream)>>>(view, firstTicket);
  return check(GPU(GetLastError)(), "launch of the persistent kernel");
}

namespace {
using OpKernel = void (*)(dev::CommView, dev::OpDesc);
OpKernel kernelOf(dev::OpKind kind) {
  switch (kind) {
    case dev::OpKind::kGemv:
    case dev::OpKind::kGemvAllReduce:
      return dev::gemvKernel;
    case dev::OpKind::kEmbeddingAllToAll:
      return dev::embeddingKernel;
    case dev::OpKind::kGemmAllToAll:
      return dev::gemmKernel;
    default:
      return dev::opKernel;
  }
}

// Dynamic shared memory of the kernel of `kind`; the first call for a kernel that needs more than
// the default 48 KB raises its limit (once per process and device is enough: it is a property of
// the function, and every device of one build has the same).
Outcome sharedBytesOf(dev::OpKind kind, int* bytes) {
  *bytes = kind == dev::OpKind::kGemmAllToAll ? dev::gemmSharedBytes() : 0;
  if (*bytes <= 48 * 1024) return {};
  static const Outcome raised =
      check(GPU(FuncSetAttribute)(reinterpret_cast<const void*>(dev::gemmKernel),
                                  GPU(FuncAttributeMaxDynamicSharedMemorySize), dev::gemmSharedBytes()),
            "FuncSetAttribute(MaxDynamicSharedMemorySize) of the GEMM kernel");
  return raised;
}
}  // namespace

Outcome launchOp(const dev::CommView& view, const dev::OpDesc& desc, int blocks, int threads, void* stream) {
  const auto kind = static_cast<dev::OpKind>(desc.kind);
  int shared = 0;
  if (Outcome o = sharedBytesOf(kind, &shared); !o) return o;
  kernelOf(kind)<<<blocks, threads, shared, static_cast<gpuStream_t>(stream)>>>(view, desc);
  return check(GPU(GetLastError)(), "launch of an op kernel");
}

Outcome residentOpBlocks(dev::OpKind kind, int threads, int* blocks) {
  int device = 0, perSm = 0;
  gpuDeviceProp_t prop{};
  int shared = 0;
  Outcome o = sharedBytesOf(kind, &shared);
  if (o) o = check(GPU(GetDevice)(&device), "GetDevice");
  if (o) o = check(GPU(GetDeviceProperties)(&prop, device), "GetDeviceProperties");
  if (o)
    o = check(GPU(OccupancyMaxActiveBlocksPerMultiprocessor)(&perSm, kernelOf(kind), threads, shared),
              "OccupancyMaxActiveBlocksPerMultiprocessor");
  if (o) *blocks = perSm * prop.multiProcessorCount;
  return o;
}

Outcome eventCreate(void** event) {
  GPU(Event_t) e;
  Outcome o = check(GPU(EventCreateWithFlags)(&e, GPU(EventDisableTiming)), "EventCreateWithFlags");
  if (o) *event = e;
  return o;
}
Outcome eventDestroy(void* event) { return check(GPU(EventDestroy)(static_cast<GPU(Event_t)>(event)), "EventDestroy"); }
Outcome eventRecord(void* event, void* stream) {
  return check(GPU(EventRecord)(static_cast<GPU(Event_t)>(event), static_cast<gpuStream_t>(stream)), "EventRecord");
}
Outcome streamWaitEvent(void* stream, void* event) {
  return check(GPU(StreamWaitEvent)(static_cast<gpuStream_t>(stream), static_cast<GPU(Event_t)>(event), 0),
               "StreamWaitEvent");
}

}  // namespace weft::gpu
