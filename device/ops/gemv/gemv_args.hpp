// What host code needs of the GEMV + AllReduce without its device code: the limits it checks
// the caller's arguments against.
#pragma once

#include <cstdint>

namespace weft::dev {

// The most rows of x one op multiplies: the exchange's slices hold batch x rows partials.
constexpr uint32_t kGemvMaxBatch = 64;

}  // namespace weft::dev
