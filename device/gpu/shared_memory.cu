// Device memory that another process maps by a file descriptor (gpu_host.hpp,
// sharedDeviceCreate): the driver's virtual memory calls, the allocation exported as a POSIX file
// descriptor. Legacy IPC handles (ipcExport) name memory by an opaque token that any process of the
// host may open; a descriptor reaches only the process it is passed to, over weftd's checked
// socket, which is why service mode uses these.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "../gpu_host.hpp"
#include "vendor.hpp"

namespace weft::gpu {

Outcome deviceByPciId(const std::string& pciId, int* device) {
  // devicePciId's "domain:bus:device" is the runtime's bus id without its function.
  return check(GPU(DeviceGetByPCIBusId)(device, (pciId + ".0").c_str()), "DeviceGetByPCIBusId");
}

#if defined(WEFT_BACKEND_CUDA)

namespace {

// One entry point per call, fetched once (driverEntry says why through the runtime).
#define WEFT_DRIVER_CALL(name, version)                                       \
  static const auto name##Entry = driverEntry<PFN_##name##_##version>(#name); \
  if (!name##Entry.status) return name##Entry.status

CUmemAllocationProp propOn(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// `bytes` rounded up to the driver's allocation granularity on `device`. The maker and the
// mappers round alike, so `bytes` is all a mapper needs to know.
Outcome roundToGranule(int device, size_t bytes, size_t* rounded) {
  WEFT_DRIVER_CALL(cuMemGetAllocationGranularity, v10020);
  const CUmemAllocationProp prop = propOn(device);
  size_t granule = 0;
  const Outcome o =
      checkDriver(cuMemGetAllocationGranularityEntry.fn(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                  "cuMemGetAllocationGranularity");
  if (o) *rounded = (bytes + granule - 1) / granule * granule;
  return o;
}

Outcome currentGranules(size_t bytes, size_t* rounded) {
  int device = 0;
  const Outcome o = check(GPU(GetDevice)(&device), "GetDevice");
  return o ? roundToGranule(device, bytes, rounded) : o;
}

// Reads and writes for `owner` and every device of this process that reaches it (weftd's engines
// of ranks on other GPUs store into it); owner < 0: the current device only (a rank's mapping).
Outcome allowAccess(CUdeviceptr va, size_t bytes, int owner) {
  WEFT_DRIVER_CALL(cuMemSetAccess, v10020);
  int count = 0, current = 0;
  Outcome o = check(GPU(GetDeviceCount)(&count), "GetDeviceCount");
  if (o) o = check(GPU(GetDevice)(&current), "GetDevice");
  if (!o) return o;
  std::vector<CUmemAccessDesc> access;
  for (int d = 0; d < count; ++d) {
    int reaches = d == (owner < 0 ? current : owner);
    if (!reaches && owner >= 0 && GPU(DeviceCanAccessPeer)(&reaches, d, owner) != kGpuSuccess) {
      (void)GPU(GetLastError)();
      reaches = 0;
    }
    if (!reaches) continue;
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = d;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access.push_back(a);
  }
  return checkDriver(cuMemSetAccessEntry.fn(va, bytes, access.data(), access.size()), "cuMemSetAccess");
}

// Maps the allocation `h` (whose reference it then drops: the mapping keeps the memory) at a
// fresh range of addresses.
Outcome mapHandle(CUmemGenericAllocationHandle h, size_t bytes, int owner, void** ptr) {
  WEFT_DRIVER_CALL(cuMemAddressReserve, v10020);
  WEFT_DRIVER_CALL(cuMemMap, v10020);
  WEFT_DRIVER_CALL(cuMemUnmap, v10020);
  WEFT_DRIVER_CALL(cuMemAddressFree, v10020);
  WEFT_DRIVER_CALL(cuMemRelease, v10020);
  CUdeviceptr va = 0;
  Outcome o = checkDriver(cuMemAddressReserveEntry.fn(&va, bytes, 0, 0, 0), "cuMemAddressReserve");
  if (o) {
    o = checkDriver(cuMemMapEntry.fn(va, bytes, 0, h, 0), "cuMemMap");
    if (o) {
      o = allowAccess(va, bytes, owner);
      if (!o) (void)cuMemUnmapEntry.fn(va, bytes);
    }
    if (!o) (void)cuMemAddressFreeEntry.fn(va, bytes);
  }
  (void)cuMemReleaseEntry.fn(h);
  if (o) *ptr = reinterpret_cast<void*>(va);
  return o;
}

}  // namespace

Outcome sharedDeviceCreate(int device, size_t bytes, void** ptr, size_t* mapped, int* fd) {
  WEFT_DRIVER_CALL(cuMemCreate, v10020);
  WEFT_DRIVER_CALL(cuMemExportToShareableHandle, v10020);
  WEFT_DRIVER_CALL(cuMemRelease, v10020);
  const CUmemAllocationProp prop = propOn(device);
  size_t size = 0;
  Outcome o = roundToGranule(device, bytes, &size);
  if (!o) return o;
  CUmemGenericAllocationHandle h = 0;
  const CUresult made = cuMemCreateEntry.fn(&h, size, &prop, 0);
  if (made != CUDA_SUCCESS) {
    o = checkDriver(made, "cuMemCreate");
    if (made == CUDA_ERROR_OUT_OF_MEMORY) o.fault = Fault::kOutOfMemory;
    return o;
  }
  int exported = -1;
  o = checkDriver(cuMemExportToShareableHandleEntry.fn(&exported, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                  "cuMemExportToShareableHandle");
  if (!o) {
    (void)cuMemReleaseEntry.fn(h);
    return o;
  }
  (void)::fcntl(exported, F_SETFD, FD_CLOEXEC);  // the driver's descriptor is inherited otherwise
  o = mapHandle(h, size, device, ptr);
  if (!o) {
    ::close(exported);
    return o;
  }
  *mapped = size;
  *fd = exported;
  return o;
}

Outcome sharedDeviceMap(int fd, size_t bytes, void** ptr) {
  WEFT_DRIVER_CALL(cuMemImportFromShareableHandle, v10020);
  size_t size = 0;
  Outcome o = currentGranules(bytes, &size);
  CUmemGenericAllocationHandle h = 0;
  if (o)
    o = checkDriver(cuMemImportFromShareableHandleEntry.fn(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                    "cuMemImportFromShareableHandle");
  return o ? mapHandle(h, size, -1, ptr) : o;
}

Outcome sharedDeviceUnmap(void* ptr, size_t bytes) {
  WEFT_DRIVER_CALL(cuMemUnmap, v10020);
  WEFT_DRIVER_CALL(cuMemAddressFree, v10020);
  size_t size = 0;
  Outcome o = currentGranules(bytes, &size);
  if (!o) return o;
  const auto va = reinterpret_cast<CUdeviceptr>(ptr);
  o = checkDriver(cuMemUnmapEntry.fn(va, size), "cuMemUnmap");
  const Outcome freed = checkDriver(cuMemAddressFreeEntry.fn(va, size), "cuMemAddressFree");
  return o ? freed : o;
}

Outcome ipcRange(const void* ptr, IpcHandle* handle, uint64_t* base, uint64_t* size, uint64_t* bufferId) {
  WEFT_DRIVER_CALL(cuMemGetAddressRange, v3020);
  WEFT_DRIVER_CALL(cuPointerGetAttribute, v4000);
  const auto p = reinterpret_cast<CUdeviceptr>(ptr);
  CUdeviceptr b = 0;
  size_t n = 0;
  unsigned long long id = 0;
  Outcome o = checkDriver(cuMemGetAddressRangeEntry.fn(&b, &n, p), "cuMemGetAddressRange");
  if (o)
    o = checkDriver(cuPointerGetAttributeEntry.fn(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p), "cuPointerGetAttribute");
  cudaIpcMemHandle_t h;
  if (o) o = check(cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(b)), "IpcGetMemHandle");
  if (!o) {
    o.fault = Fault::kNotSupported;
    return o;
  }
  memcpy(handle->bytes, &h, sizeof h);
  *base = b;
  *size = n;
  *bufferId = id;
  return o;
}

Outcome addressRange(const void* ptr, uint64_t* base, uint64_t* size) {
  WEFT_DRIVER_CALL(cuMemGetAddressRange, v3020);
  CUdeviceptr b = 0;
  size_t n = 0;
  const Outcome o =
      checkDriver(cuMemGetAddressRangeEntry.fn(&b, &n, reinterpret_cast<CUdeviceptr>(ptr)), "cuMemGetAddressRange");
  *base = b;
  *size = n;
  return o;
}

#undef WEFT_DRIVER_CALL

#else  // HIP: the same virtual memory calls are in its runtime. Compiled, not yet run on AMD hardware.

namespace {

hipMemAllocationProp propOn(int device) {
  hipMemAllocationProp prop{};
  prop.type = hipMemAllocationTypePinned;
  prop.location.type = hipMemLocationTypeDevice;
  prop.location.id = device;
  prop.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
  return prop;
}

Outcome currentGranules(size_t bytes, size_t* rounded) {
  int device = 0;
  Outcome o = check(hipGetDevice(&device), "hipGetDevice");
  const hipMemAllocationProp prop = propOn(device);
  size_t granule = 0;
  if (o)
    o = check(hipMemGetAllocationGranularity(&granule, &prop, hipMemAllocationGranularityMinimum),
              "hipMemGetAllocationGranularity");
  if (o) *rounded = (bytes + granule - 1) / granule * granule;
  return o;
}

Outcome mapHandle(hipMemGenericAllocationHandle_t h, size_t bytes, int owner, void** ptr) {
  void* va = nullptr;
  Outcome o = check(hipMemAddressReserve(&va, bytes, 0, nullptr, 0), "hipMemAddressReserve");
  if (o) {
    o = check(hipMemMap(va, bytes, 0, h, 0), "hipMemMap");
    if (o) {
      int current = 0;
      o = check(hipGetDevice(&current), "hipGetDevice");
      hipMemAccessDesc a{};
      a.location.type = hipMemLocationTypeDevice;
      a.location.id = owner < 0 ? current : owner;
      a.flags = hipMemAccessFlagsProtReadWrite;
      if (o) o = check(hipMemSetAccess(va, bytes, &a, 1), "hipMemSetAccess");
      if (!o) (void)hipMemUnmap(va, bytes);
    }
    if (!o) (void)hipMemAddressFree(va, bytes);
  }
  (void)hipMemRelease(h);
  if (o) *ptr = va;
  return o;
}

}  // namespace

Outcome sharedDeviceCreate(int device, size_t bytes, void** ptr, size_t* mapped, int* fd) {
  Outcome o = check(hipSetDevice(device), "hipSetDevice");
  size_t size = 0;
  if (o) o = currentGranules(bytes, &size);
  if (!o) return o;
  const hipMemAllocationProp prop = propOn(device);
  hipMemGenericAllocationHandle_t h{};
  o = check(hipMemCreate(&h, size, &prop, 0), "hipMemCreate");
  if (!o) return o;
  int exported = -1;
  o = check(hipMemExportToShareableHandle(&exported, h, hipMemHandleTypePosixFileDescriptor, 0),
            "hipMemExportToShareableHandle");
  if (!o) {
    (void)hipMemRelease(h);
    return o;
  }
  (void)::fcntl(exported, F_SETFD, FD_CLOEXEC);  // the driver's descriptor is inherited otherwise
  o = mapHandle(h, size, device, ptr);
  if (!o) {
    ::close(exported);
    return o;
  }
  *mapped = size;
  *fd = exported;
  return o;
}

Outcome sharedDeviceMap(int fd, size_t bytes, void** ptr) {
  size_t size = 0;
  Outcome o = currentGranules(bytes, &size);
  hipMemGenericAllocationHandle_t h{};
  if (o)
    o = check(hipMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                              hipMemHandleTypePosixFileDescriptor),
              "hipMemImportFromShareableHandle");
  return o ? mapHandle(h, size, -1, ptr) : o;
}

Outcome ipcRange(const void*, IpcHandle*, uint64_t*, uint64_t*, uint64_t*) {
  return Outcome{Fault::kNotSupported, "HIP has no id of an allocation to cache a mapping by"};
}

Outcome addressRange(const void* ptr, uint64_t* base, uint64_t* size) {
  hipDeviceptr_t b = nullptr;
  size_t n = 0;
  const Outcome o = check(hipMemGetAddressRange(&b, &n, const_cast<void*>(ptr)), "hipMemGetAddressRange");
  *base = reinterpret_cast<uint64_t>(b);
  *size = n;
  return o;
}

Outcome sharedDeviceUnmap(void* ptr, size_t bytes) {
  size_t size = 0;
  Outcome o = currentGranules(bytes, &size);
  if (!o) return o;
  o = check(hipMemUnmap(ptr, size), "hipMemUnmap");
  const Outcome freed = check(hipMemAddressFree(ptr, size), "hipMemAddressFree");
  return o ? freed : o;
}

#endif

}  // namespace weft::gpu
