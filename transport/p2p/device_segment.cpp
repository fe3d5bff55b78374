#include "device_segment.hpp"

#include <unistd.h>

#include <utility>

#include "gpu_require.hpp"

namespace weft::transport {

DeviceSegment& DeviceSegment::operator=(DeviceSegment&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

DeviceSegment DeviceSegment::create(int device, uint64_t bytes, uint64_t zeroBytes, int* fd, const std::string& what) {
  DeviceSegment s;
  size_t mapped = 0;
  requireGpu(gpu::sharedDeviceCreate(device, bytes, &s.data_, &mapped, fd), what);
  s.size_ = mapped;
  // Zeroed on a stream of its own and waited for, as the embedded heap's control area is
  // (device_heap.cpp): no peer may reach it before it reads as zero.
  void* zeroing = nullptr;
  gpu::Outcome o = gpu::setDevice(device);
  if (o) o = gpu::streamCreateNonBlocking(&zeroing);
  if (o) {
    o = gpu::zeroDeviceNow(s.data_, zeroBytes, zeroing, 10.0);
    gpu::streamDestroy(zeroing);
  }
  if (!o) {
    s.reset();
    ::close(*fd);
    *fd = -1;
    requireGpu(o, what + ": zeroing its control area");
  }
  return s;
}

DeviceSegment DeviceSegment::map(int fd, uint64_t bytes, const std::string& what) {
  DeviceSegment s;
  requireGpu(gpu::sharedDeviceMap(fd, bytes, &s.data_), "mapping " + what);
  s.size_ = bytes;
  return s;
}

void DeviceSegment::reset() {
  if (data_) (void)gpu::sharedDeviceUnmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace weft::transport
