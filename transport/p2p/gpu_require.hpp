// The p2p path's GPU calls fail as weft::Error, with the driver's words after what weft was doing.
// GPU builds only (device/gpu_host.hpp).
#pragma once

#include <string>

#include "common/error.hpp"
#include "device/gpu_host.hpp"

namespace weft::transport {

inline void requireGpu(const gpu::Outcome& o, const std::string& what) {
  if (o) return;
  const Code code = o.fault == gpu::Fault::kOutOfMemory    ? Code::kOutOfMemory
                    : o.fault == gpu::Fault::kNotSupported ? Code::kNotSupported
                                                           : Code::kSystem;
  throw Error(code, what + ": " + o.message);
}

}  // namespace weft::transport
