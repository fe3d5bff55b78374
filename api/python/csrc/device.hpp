// What differs between the CPU and CUDA builds of the extension: the device of the symmetric heap,
// the stream an op is enqueued on, and how the host waits for the device.
#pragma once

#include <ATen/ATen.h>

#ifdef WEFT_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace weft::torch_ext {

#ifdef WEFT_TORCH_CUDA
inline constexpr c10::DeviceType kHeapDeviceType = c10::DeviceType::CUDA;
inline c10::Device currentDevice() { return c10::Device(kHeapDeviceType, c10::cuda::current_device()); }
// The caller's current stream on the tensor's device: weft ops are ordered with the caller's own
// kernels (and captured with them into a CUDA graph).
inline void* currentStream(const c10::Device& d) { return at::cuda::getCurrentCUDAStream(d.index()).stream(); }
// Blocks are freed only after every kernel that may still read or write them has finished, on any
// stream of the device.
inline void waitForDevice(const c10::Device& d) {
  c10::cuda::CUDAGuard guard(d);
  C10_CUDA_CHECK(cudaDeviceSynchronize());
}
#else
inline constexpr c10::DeviceType kHeapDeviceType = c10::DeviceType::CPU;
inline c10::Device currentDevice() { return c10::Device(kHeapDeviceType); }
// The CPU backend has no streams: NULL makes every op complete before it returns.
inline void* currentStream(const c10::Device&) { return nullptr; }
inline void waitForDevice(const c10::Device&) {}
#endif

}  // namespace weft::torch_ext
