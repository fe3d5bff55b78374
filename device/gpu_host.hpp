// Host-side calls of the GPU backends (CUDA or HIP, chosen at build time), thin enough to read in
// one sitting. Each returns an empty string on success, else a message naming the call and the
// driver's error; the caller decides what it means. Not compiled for the CPU backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "comm_device.hpp"

namespace weft::gpu {

// kShuttingDown: the process is exiting and the runtime is already unloaded (nothing left to do).
enum class Fault { kNone, kOutOfMemory, kNotSupported, kShuttingDown, kOther };

struct Outcome {
  Fault fault = Fault::kNone;
  std::string message;
  explicit operator bool() const { return fault == Fault::kNone; }
};

struct IpcHandle {
  unsigned char bytes[64];
};

Outcome deviceCount(int* count);
// Makes `device` this thread's current device (the one its communicators use).
Outcome setDevice(int device);
Outcome currentDevice(int* device);
Outcome deviceName(int device, std::string* name);
// The GPU's place on the PCI bus ("domain:bus:device"): the same for every process that uses it,
// whatever its CUDA_VISIBLE_DEVICES numbering, so ranks can tell that they share one.
Outcome devicePciId(int device, std::string* id);
// Whether this process's current GPU has an active NVLink (asked of NVML, loaded at run time, once
// per GPU and process); false where it has none, where NVML cannot tell, and on HIP.
bool nvlinkActive();
Outcome deviceMalloc(void** ptr, size_t bytes);
// deviceMalloc with the calling thread's capture mode relaxed for the call: a thread capturing a
// graph in the global mode (PyTorch's default) may not otherwise allocate. The memory is not part
// of the graph; it must outlive every graph that addresses it.
Outcome deviceMallocDuringCapture(void** ptr, size_t bytes);
Outcome deviceFree(void* ptr);
// Zeroes `bytes` at `ptr` on `stream` and waits (at most `seconds`) until they are zero.
Outcome zeroDeviceNow(void* ptr, size_t bytes, void* stream, double seconds);
Outcome copyToDevice(void* dst, const void* src, size_t bytes);
// Ordered on `stream` only; `src` must stay valid (and be device-accessible) until it drains.
Outcome copyToDeviceAsync(void* dst, const void* src, size_t bytes, void* stream);
// The same, device to host (`dst` pinned: hostRegister, for the copy to be asynchronous).
Outcome copyToHostAsync(void* dst, const void* src, size_t bytes, void* stream);
// Lets the calling thread make CUDA calls while another thread captures a graph in the global
// mode, which forbids "potentially unsafe" calls in every thread (cudaStreamCaptureModeRelaxed):
// for a thread whose calls touch only a stream of its own (the status watch).
Outcome relaxCaptureMode();
Outcome ipcExport(IpcHandle* handle, void* ptr);
Outcome ipcImport(void** ptr, const IpcHandle& handle);
Outcome ipcClose(void* ptr);
// Device memory that other processes of the host map by a file descriptor (service mode: weftd
// makes every rank's heap, the ranks map theirs and their peers'). sharedDeviceCreate makes at
// least `bytes` on `device` (*mapped: the size, rounded up to the driver's granularity), mapped
// here at *ptr for `device` and every device of this process that reaches it; *fd is its
// descriptor (close-on-exec, the caller's to close). The memory is not zeroed.
Outcome sharedDeviceCreate(int device, size_t bytes, void** ptr, size_t* mapped, int* fd);
// Maps the memory behind `fd` (sharedDeviceCreate's, from another process; `bytes` its mapped
// size) at *ptr, for the current device.
Outcome sharedDeviceMap(int fd, size_t bytes, void** ptr);
// Unmaps what either made; the memory goes once no process maps it.
Outcome sharedDeviceUnmap(void* ptr, size_t bytes);
// The allocation of device memory that holds `ptr`: its IPC handle (for another process to map
// it), its base and size, and the driver's id of the allocation, which no later allocation at the
// same address shares (a mapping cached by it never outlives what it maps). kNotSupported where
// the memory cannot be exported so (memory from a pool or the virtual memory calls, managed
// memory; on HIP, which has no such id).
Outcome ipcRange(const void* ptr, IpcHandle* handle, uint64_t* base, uint64_t* size, uint64_t* bufferId);
// The range this process has mapped around `ptr` (an allocation, or an import of another
// process's memory: the driver maps the whole block the exported allocation was cut from).
Outcome addressRange(const void* ptr, uint64_t* base, uint64_t* size);
// The device at PCI location `pciId` (devicePciId's form), in this process's numbering.
Outcome deviceByPciId(const std::string& pciId, int* device);
// Pins host memory and maps it into the device; *devicePtr is its address there.
Outcome hostRegister(void* ptr, size_t bytes, void** devicePtr);
Outcome hostUnregister(void* ptr);
Outcome streamCreateNonBlocking(void** stream);
Outcome streamDestroy(void* stream);
// Waits at most `seconds`; kOther with "still running" when the stream did not drain in time.
Outcome streamDrain(void* stream, double seconds);
Outcome streamIsCapturing(void* stream, bool* capturing);
// Without waiting: a failure of the stream's work (a kernel that faulted), else success (still
// running or done).
Outcome streamFault(void* stream);
// Stream-ordered 64-bit store, and wait until *addr >= value; addr is a device-mapped address.
Outcome streamWriteValue(void* stream, uint64_t* addr, uint64_t value);
Outcome streamWaitAtLeast(void* stream, uint64_t* addr, uint64_t value);
// `proxied` below picks the kernels whose device code posts to the host proxy, for a communicator
// with proxy peers (gpu/kernels.hpp).
// Launches the persistent kernel: `blocks` workers of `threads` threads on `stream`, starting at
// ticket `firstTicket`.
Outcome launchPersistent(const dev::CommView& view, int blocks, int threads, void* stream, uint64_t firstTicket,
                         bool proxied);

// Launches one op as a kernel of `blocks` x `threads` on `stream` (eagerly, or into the graph the
// stream is capturing), the kernel of the op's family.
Outcome launchOp(const dev::CommView& view, const dev::OpDesc& desc, int blocks, int threads, void* stream,
                 bool proxied);
// Whether the GEMM kernel this device runs can split its last wave along k (the sm_90a tile:
// gemm_split_device.hpp); the engine then gives it a partials buffer.
bool gemmSplitsLastWave();
// How many blocks of `threads` of the launched kernel of `kind` the current device runs at once.
Outcome residentOpBlocks(dev::OpKind kind, int threads, bool proxied, int* blocks);
// The same for the persistent kernel.
Outcome residentPersistentBlocks(int threads, bool proxied, int* blocks);
// Loads every kernel of the variant into the current device's context now. Under lazy module
// loading (CUDA's default) a kernel's first launch loads it, and the load waits for the device's
// work to drain: beside a peer's kernel that spins until this rank's op arrives, that first launch
// would wait until the peer timed out.
Outcome loadKernels(bool proxied);
// The current device's streaming multiprocessors (compute units on AMD).
Outcome smCount(int* sms);
// The kernels a GEMM + All-to-All op runs as: the multiply's (the fused path), the blas path's
// route of the vendor BLAS's product (no multiply), and that route on one rank (a checked copy).
enum class GemmVariant { kMultiply, kRoute, kSoloRoute };
// What the compiler gave the launched kernel of `kind` on the current device: registers per
// thread, and local memory per thread (its stack frame, where spills go); `gemm` picks the GEMM
// op's kernel.
struct KernelResources {
  int registers = 0;
  size_t localBytes = 0;
};
Outcome kernelResources(dev::OpKind kind, bool proxied, KernelResources* out,
                        GemmVariant gemm = GemmVariant::kMultiply);
Outcome eventCreate(void** event);
Outcome eventDestroy(void* event);
Outcome eventRecord(void* event, void* stream);
Outcome streamWaitEvent(void* stream, void* event);
// Waits at most `seconds` for the event; kOther with "still pending" when it did not complete.
Outcome eventDrain(void* event, double seconds);

}  // namespace weft::gpu
