// Device memory shared with other processes of the host by a file descriptor: in service mode
// weftd makes every rank's heap on the rank's GPU (create) and passes the descriptors over its
// socket; each rank maps its own and its peers' (map). GPU builds only (device/gpu_host.hpp,
// sharedDeviceCreate); the CPU backend's counterpart is ShmSegment::createAnonymous.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace weft::transport {

class DeviceSegment {
 public:
  DeviceSegment() = default;
  DeviceSegment(DeviceSegment&& o) noexcept { *this = std::move(o); }
  DeviceSegment& operator=(DeviceSegment&& o) noexcept;
  DeviceSegment(const DeviceSegment&) = delete;
  DeviceSegment& operator=(const DeviceSegment&) = delete;
  ~DeviceSegment() { reset(); }

  // Makes at least `bytes` on `device`, its first `zeroBytes` zeroed before this returns, mapped
  // here; *fd receives its descriptor (the caller's to close). `what` names it in errors. Throws
  // weft::Error (kOutOfMemory where the GPU has no room).
  static DeviceSegment create(int device, uint64_t bytes, uint64_t zeroBytes, int* fd, const std::string& what);
  // Maps the segment behind `fd` (which stays the caller's), made by create in another process
  // with the same `bytes`, for the current device. Throws weft::Error.
  static DeviceSegment map(int fd, uint64_t bytes, const std::string& what);

  void* data() const { return data_; }
  // The mapped size: `bytes` rounded up to the driver's granularity.
  uint64_t size() const { return size_; }
  // Unmaps; the memory goes once no process maps it. The object becomes empty.
  void reset();

 private:
  void* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace weft::transport
