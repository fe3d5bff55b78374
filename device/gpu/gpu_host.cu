// weft::gpu host calls for CUDA and HIP. The vendor names are aliased in vendor.hpp, which only
// the implementation files of this folder include.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "../gpu_host.hpp"
#include "../ops/collectives/allreduce_oneshot_device.hpp"
#include "../ops/gemm/gemm_alltoall_device.hpp"
#include "kernels.hpp"
#include "vendor.hpp"

namespace weft::gpu {

namespace {

// What this process has found out or done once per device, one word each (0: not yet). A
// process may drive several GPUs, of different kinds: a kernel's image, its attributes and the
// GPU's links are the device's, not the process's. Devices past the table are asked every time.
constexpr int kKnownDevices = 64;
using PerDevice = std::atomic<uint8_t>[kKnownDevices];
std::atomic<uint8_t>* deviceWord(PerDevice& words) {
  int device = -1;
  if (GPU(GetDevice)(&device) != kGpuSuccess) (void)GPU(GetLastError)();
  return device >= 0 && device < kKnownDevices ? &words[device] : nullptr;
}
// ask() for the current device, once per device (two threads asking at once get the same answer).
template <class Ask>
bool askOncePerDevice(PerDevice& known, Ask&& ask) {
  std::atomic<uint8_t>* word = deviceWord(known);
  uint8_t answer = word ? word->load(std::memory_order_acquire) : 0;  // 1: no, 2: yes
  if (answer == 0) {
    answer = ask() ? 2 : 1;
    if (word) word->store(answer, std::memory_order_release);
  }
  return answer == 2;
}

}  // namespace

Outcome deviceCount(int* count) { return check(GPU(GetDeviceCount)(count), "GetDeviceCount"); }
Outcome setDevice(int device) { return check(GPU(SetDevice)(device), "SetDevice"); }
Outcome currentDevice(int* device) { return check(GPU(GetDevice)(device), "GetDevice"); }

Outcome deviceName(int device, std::string* name) {
  gpuDeviceProp_t prop{};
  Outcome o = check(GPU(GetDeviceProperties)(&prop, device), "GetDeviceProperties");
  if (o) *name = prop.name;
  return o;
}

Outcome devicePciId(int device, std::string* id) {
  gpuDeviceProp_t prop{};
  Outcome o = check(GPU(GetDeviceProperties)(&prop, device), "GetDeviceProperties");
  if (o) {
    char text[32];
    snprintf(text, sizeof text, "%04x:%02x:%02x", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    *id = text;
  }
  return o;
}

namespace {

#if defined(WEFT_BACKEND_CUDA)
// Whether GPU `device` has an active NVLink, as NVML says. NVML ships with the driver (the toolkit
// here has no header): the few entry points used, by their stable C ABI. 0 is NVML_SUCCESS and
// NVML_FEATURE_ENABLED is 1; H100/H200 have 18 links.
bool askNvml(int device) {
  constexpr unsigned kMaxLinks = 18;
  using Call = int (*)();
  using HandleByBusId = int (*)(const char*, void**);
  using LinkState = int (*)(void*, unsigned, int*);
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
  const auto init = reinterpret_cast<Call>(dlsym(lib, "nvmlInit_v2"));
  const auto shutdown = reinterpret_cast<Call>(dlsym(lib, "nvmlShutdown"));
  const auto byBusId = reinterpret_cast<HandleByBusId>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  const auto linkState = reinterpret_cast<LinkState>(dlsym(lib, "nvmlDeviceGetNvLinkState"));
  bool active = false;
  if (init && shutdown && byBusId && linkState && init() == 0) {
    char busId[32] = {};
    void* handle = nullptr;
    if (cudaDeviceGetPCIBusId(busId, sizeof busId, device) == cudaSuccess && byBusId(busId, &handle) == 0)
      for (unsigned link = 0; link < kMaxLinks && !active; ++link) {
        int enabled = 0;
        active = linkState(handle, link, &enabled) == 0 && enabled == 1;
      }
    shutdown();
  }
  dlclose(lib);
  return active;
}
#endif

}  // namespace

bool nvlinkActive() {
#if defined(WEFT_BACKEND_CUDA)
  // Asked once per GPU and process: every communicator asks (a framework may create dozens), and
  // loading and initialising NVML, which opens every GPU of the machine, is slow.
  static PerDevice known;
  return askOncePerDevice(known, [] {
    int device = 0;
    return cudaGetDevice(&device) == cudaSuccess && askNvml(device);
  });
#else
  return false;
#endif
}

Outcome deviceMalloc(void** ptr, size_t bytes) {
  return check(GPU(Malloc)(ptr, bytes), ("Malloc(" + std::to_string(bytes) + ")").c_str());
}
Outcome deviceMallocDuringCapture(void** ptr, size_t bytes) {
  GPU(StreamCaptureMode) mode = GPU(StreamCaptureModeRelaxed);
  Outcome o = check(GPU(ThreadExchangeStreamCaptureMode)(&mode), "ThreadExchangeStreamCaptureMode");
  if (!o) return o;
  o = deviceMalloc(ptr, bytes);
  const Outcome back = check(GPU(ThreadExchangeStreamCaptureMode)(&mode), "ThreadExchangeStreamCaptureMode");
  if (!back && o) {
    (void)deviceFree(*ptr);
    *ptr = nullptr;
    return back;
  }
  return o;
}
Outcome deviceFree(void* ptr) { return check(GPU(Free)(ptr), "Free"); }
Outcome zeroDeviceNow(void* ptr, size_t bytes, void* stream, double seconds) {
  const Outcome o = check(GPU(MemsetAsync)(ptr, 0, bytes, static_cast<gpuStream_t>(stream)), "MemsetAsync");
  return o ? streamDrain(stream, seconds) : o;
}
Outcome copyToDevice(void* dst, const void* src, size_t bytes) {
  return check(GPU(Memcpy)(dst, src, bytes, GPU(MemcpyHostToDevice)), "Memcpy");
}

Outcome copyToDeviceAsync(void* dst, const void* src, size_t bytes, void* stream) {
  return check(GPU(MemcpyAsync)(dst, src, bytes, GPU(MemcpyDefault), static_cast<gpuStream_t>(stream)), "MemcpyAsync");
}

Outcome copyToHostAsync(void* dst, const void* src, size_t bytes, void* stream) {
  return check(GPU(MemcpyAsync)(dst, src, bytes, GPU(MemcpyDeviceToHost), static_cast<gpuStream_t>(stream)),
               "MemcpyAsync");
}

Outcome relaxCaptureMode() {
  GPU(StreamCaptureMode) mode = GPU(StreamCaptureModeRelaxed);
  return check(GPU(ThreadExchangeStreamCaptureMode)(&mode), "ThreadExchangeStreamCaptureMode");
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
  if (!o) return o;
  o = check(GPU(HostGetDevicePointer)(devicePtr, ptr, 0), "HostGetDevicePointer");
  if (!o) (void)GPU(HostUnregister)(ptr);  // the caller keeps nothing registered on failure
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

Outcome streamFault(void* stream) {
  const gpuError_t e = GPU(StreamQuery)(static_cast<gpuStream_t>(stream));
  return e == kGpuNotReady ? Outcome{} : check(e, "StreamQuery");
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

namespace {
using OpKernel = void (*)(dev::CommView, dev::OpDesc);
using GemmKernel = void (*)(dev::CommView, dev::OpDesc, const dev::tile::GemmMaps);
// The kernels of one variant (kernels.hpp).
struct Kernels {
  void (*persistent)(dev::CommView, uint64_t);
  OpKernel op, oneShotLines, gemv, embedding;
  GemmKernel gemm;
  OpKernel gemmRoute, gemmSolo;
};
const Kernels& kernels(bool proxied) {
  static const Kernels direct{dev::direct::persistentKernel,   dev::direct::opKernel,
                              dev::direct::oneShotLinesKernel, dev::direct::gemvKernel,
                              dev::direct::embeddingKernel,    dev::direct::gemmKernel,
                              dev::direct::gemmRouteKernel,    dev::direct::gemmSoloKernel};
  static const Kernels viaProxy{dev::proxied::persistentKernel,   dev::proxied::opKernel,
                                dev::proxied::oneShotLinesKernel, dev::proxied::gemvKernel,
                                dev::proxied::embeddingKernel,    dev::proxied::gemmKernel,
                                dev::proxied::gemmRouteKernel,    dev::proxied::gemmSoloKernel};
  return proxied ? viaProxy : direct;
}
// The kernel of every kind but the GEMM's, whose kernel takes the tensor maps too. `lines`: the
// one-shot AllReduce's wire format (its occupancy is asked of the 128-byte lines' kernel; on H200
// both kernels hold two blocks per SM).
OpKernel kernelOf(dev::OpKind kind, bool lines, bool proxied) {
  const Kernels& k = kernels(proxied);
  switch (kind) {
    case dev::OpKind::kGemv:
    case dev::OpKind::kGemvAllReduce:
      return k.gemv;
    case dev::OpKind::kEmbeddingAllToAll:
    case dev::OpKind::kEmbeddingPool:
      return k.embedding;
    case dev::OpKind::kAllReduceOneShot:
      return lines ? k.oneShotLines : k.op;
    default:
      return k.op;
  }
}
const void* kernelAddress(dev::OpKind kind, bool proxied, GemmVariant gemm = GemmVariant::kMultiply) {
  if (kind != dev::OpKind::kGemmAllToAll) return reinterpret_cast<const void*>(kernelOf(kind, true, proxied));
  const Kernels& k = kernels(proxied);
  switch (gemm) {
    case GemmVariant::kRoute:
      return reinterpret_cast<const void*>(k.gemmRoute);
    case GemmVariant::kSoloRoute:
      return reinterpret_cast<const void*>(k.gemmSolo);
    case GemmVariant::kMultiply:
      break;
  }
  return reinterpret_cast<const void*>(k.gemm);
}
}  // namespace

Outcome launchPersistent(const dev::CommView& view, int blocks, int threads, void* stream, uint64_t firstTicket,
                         bool proxied) {
  kernels(proxied).persistent<<<blocks, threads, 0, static_cast<gpuStream_t>(stream)>>>(view, firstTicket);
  return check(GPU(GetLastError)(), "launch of the persistent kernel");
}

namespace {

// Whether the GEMM kernel the current device runs is the sm_90a build (the copy engine's tile),
// as its image says (a plain sm_90 image has the same binary version and the cp.async tile); asked
// once per device.
bool gemmUsesTma() {
  static PerDevice known;
  return askOncePerDevice(known, [] { return dev::gemmKernelHasTmaTile(); });
}

// Dynamic shared memory of the kernel of `kind`; the first call for a kernel that needs more than
// the default 48 KB on a device raises its limit there (a function's attribute is set per device).
Outcome sharedBytesOf(dev::OpKind kind, bool proxied, int* bytes) {
  *bytes = kind == dev::OpKind::kGemmAllToAll ? dev::gemmSharedBytes(gemmUsesTma()) : 0;
  if (*bytes <= 48 * 1024) return {};
  static PerDevice raised[2];  // 1: the GEMM kernel's limit is raised, per variant
  std::atomic<uint8_t>* word = deviceWord(raised[proxied]);
  if (word && word->load(std::memory_order_acquire) == 1) return {};
  Outcome o = check(GPU(FuncSetAttribute)(reinterpret_cast<const void*>(kernels(proxied).gemm),
                                          GPU(FuncAttributeMaxDynamicSharedMemorySize), *bytes),
                    "FuncSetAttribute(MaxDynamicSharedMemorySize) of the GEMM kernel");
  if (o && word) word->store(1, std::memory_order_release);
  return o;
}

// a [tokens][k] and w [experts][k][h] as the sm_90a tile loads them (gemm_tma_device.hpp): boxes
// of a slice's rows, 128-byte swizzled, zeros past every bound. Nothing to encode where no tile
// loads anything, nor where the op routes a product it was given (no w).
Outcome encodeGemmMaps(const dev::OpDesc& desc, dev::tile::GemmMaps* maps) {
  *maps = {};
#if defined(WEFT_BACKEND_CUDA)
  const dev::GemmArgs g = dev::GemmAllToAllOp::args(desc);
  if (!gemmUsesTma() || g.productGiven() || g.tokens == 0 || g.k == 0 || g.h == 0) return {};
  static const auto entry = driverEntry<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled");
  if (!entry.status) return entry.status;
  static_assert(sizeof(dev::tile::TensorMap) == sizeof(CUtensorMap));
  constexpr auto kK = static_cast<cuuint32_t>(dev::tile::kTmaK);
  const cuuint32_t ones[3] = {1, 1, 1};
  auto encode = [&](dev::tile::TensorMap* map, const uint8_t* base, cuuint32_t rank, const cuuint64_t* dims,
                    const cuuint64_t* strides, const cuuint32_t* box, CUtensorMapSwizzle swizzle, const char* call) {
    return checkDriver(entry.fn(reinterpret_cast<CUtensorMap*>(map), CU_TENSOR_MAP_DATA_TYPE_UINT16, rank,
                                const_cast<uint8_t*>(base), dims, strides, box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                       call);
  };
  // a's box rows span the slice's k (64 or 128 bytes), w's one 64-column block (128 bytes).
  constexpr CUtensorMapSwizzle aSwizzle =
      dev::tile::kTmaARowBytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const cuuint64_t aDims[2] = {g.k, g.tokens}, aStrides[1] = {g.k * 2};
  const cuuint32_t aBox[2] = {kK, static_cast<cuuint32_t>(dev::tile::kM)};
  const cuuint64_t wDims[3] = {g.h, g.k, g.experts}, wStrides[2] = {g.h * 2, g.k * g.h * 2};
  const cuuint32_t wBox[3] = {64, kK, 1};
  Outcome o = encode(&maps->a, g.a, 2, aDims, aStrides, aBox, aSwizzle, "cuTensorMapEncodeTiled (a)");
  if (o) o = encode(&maps->w, g.w, 3, wDims, wStrides, wBox, CU_TENSOR_MAP_SWIZZLE_128B, "cuTensorMapEncodeTiled (w)");
  return o;
#else
  (void)desc;
  return {};
#endif
}
}  // namespace

Outcome launchOp(const dev::CommView& view, const dev::OpDesc& desc, int blocks, int threads, void* stream,
                 bool proxied) {
  const auto kind = static_cast<dev::OpKind>(desc.kind);
  if (kind == dev::OpKind::kGemmAllToAll && dev::GemmAllToAllOp::args(desc).productGiven()) {
    // The blas path: the product's rows routed by a kernel without the multiply (gemm_kernel.cu),
    // on one rank copied. Its grid is the GEMM's, which it always holds at once (a lighter kernel,
    // same block size).
    const Kernels& k = kernels(proxied);
    (view.nranks == 1 ? k.gemmSolo : k.gemmRoute)<<<blocks, threads, 0, static_cast<gpuStream_t>(stream)>>>(view, desc);
    return check(GPU(GetLastError)(), "launch of the GEMM's route kernel");
  }
  int shared = 0;
  if (Outcome o = sharedBytesOf(kind, proxied, &shared); !o) return o;
  if (kind == dev::OpKind::kGemmAllToAll) {
    dev::tile::GemmMaps maps;
    if (Outcome o = encodeGemmMaps(desc, &maps); !o) return o;
    kernels(proxied).gemm<<<blocks, threads, shared, static_cast<gpuStream_t>(stream)>>>(view, desc, maps);
  } else {
    const bool lines = kind == dev::OpKind::kAllReduceOneShot && desc.args.oneShot.lines != 0;
    const OpKernel kernel = kernelOf(kind, lines, proxied);
    kernel<<<blocks, threads, shared, static_cast<gpuStream_t>(stream)>>>(view, desc);
  }
  return check(GPU(GetLastError)(), "launch of an op kernel");
}

bool gemmSplitsLastWave() { return gemmUsesTma(); }

Outcome residentOpBlocks(dev::OpKind kind, int threads, bool proxied, int* blocks) {
  int device = 0, perSm = 0;
  gpuDeviceProp_t prop{};
  int shared = 0;
  Outcome o = sharedBytesOf(kind, proxied, &shared);
  if (o) o = check(GPU(GetDevice)(&device), "GetDevice");
  if (o) o = check(GPU(GetDeviceProperties)(&prop, device), "GetDeviceProperties");
  if (o)
    o = check(GPU(OccupancyMaxActiveBlocksPerMultiprocessor)(&perSm, kernelAddress(kind, proxied), threads, shared),
              "OccupancyMaxActiveBlocksPerMultiprocessor");
  if (o) *blocks = perSm * prop.multiProcessorCount;
  return o;
}

Outcome kernelResources(dev::OpKind kind, bool proxied, KernelResources* out, GemmVariant gemm) {
  gpuFuncAttributes a{};
  Outcome o = check(GPU(FuncGetAttributes)(&a, kernelAddress(kind, proxied, gemm)), "FuncGetAttributes");
  if (o) *out = KernelResources{a.numRegs, a.localSizeBytes};
  return o;
}

Outcome residentPersistentBlocks(int threads, bool proxied, int* blocks) {
  int device = 0, perSm = 0;
  gpuDeviceProp_t prop{};
  Outcome o = check(GPU(GetDevice)(&device), "GetDevice");
  if (o) o = check(GPU(GetDeviceProperties)(&prop, device), "GetDeviceProperties");
  if (o)
    o = check(GPU(OccupancyMaxActiveBlocksPerMultiprocessor)(
                  &perSm, reinterpret_cast<const void*>(kernels(proxied).persistent), threads, 0),
              "OccupancyMaxActiveBlocksPerMultiprocessor");
  if (o) *blocks = perSm * prop.multiProcessorCount;
  return o;
}

Outcome loadKernels(bool proxied) {
  const Kernels& k = kernels(proxied);
  const void* all[] = {reinterpret_cast<const void*>(k.persistent),   reinterpret_cast<const void*>(k.op),
                       reinterpret_cast<const void*>(k.oneShotLines), reinterpret_cast<const void*>(k.gemv),
                       reinterpret_cast<const void*>(k.embedding),    reinterpret_cast<const void*>(k.gemm),
                       reinterpret_cast<const void*>(k.gemmRoute),    reinterpret_cast<const void*>(k.gemmSolo)};
  Outcome o;
  for (const void* f : all) {
    gpuFuncAttributes a{};
    if (o) o = check(GPU(FuncGetAttributes)(&a, f), "FuncGetAttributes (loading weft's kernels)");
  }
  return o;
}

Outcome smCount(int* sms) {
  int device = 0;
  gpuDeviceProp_t prop{};
  Outcome o = check(GPU(GetDevice)(&device), "GetDevice");
  if (o) o = check(GPU(GetDeviceProperties)(&prop, device), "GetDeviceProperties");
  if (o) *sms = prop.multiProcessorCount;
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
