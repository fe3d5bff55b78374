// A GPU call that must succeed fails as weft::Error, with the driver's words after what weft was
// doing; out of memory and unsupported keep their codes, any other failure takes `code`. GPU builds
// only (device/gpu_host.hpp): the p2p path's and the GPU backend's (runtime/backend_gpu*.cpp).
#pragma once

#include <string>

#include "common/error.hpp"
#include "device/gpu_host.hpp"

namespace weft::transport {

inline void requireGpu(const gpu::Outcome& o, const std::string& what, Code code = Code::kSystem) {
  if (o) return;
  if (o.fault == gpu::Fault::kOutOfMemory) code = Code::kOutOfMemory;
  if (o.fault == gpu::Fault::kNotSupported) code = Code::kNotSupported;
  throw Error(code, what + ": " + o.message);
}

}  // namespace weft::transport
