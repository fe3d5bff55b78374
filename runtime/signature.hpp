// Op signatures on the host: the 12-bit hashes the descriptor's signature carries, and the words
// of a failure record where ranks disagreed, in words (device/signature_device.hpp has the layout).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "device/queue_device.hpp"

namespace weft {

// A 12-bit hash of `values`, in order: two calls agree exactly when all values do (but for a
// 1-in-4096 chance that they differ and still agree).
uint32_t sigHash(std::initializer_list<uint64_t> values);

// The failure record of ranks that disagree on an op (Status::kMismatch): which field differs,
// with the ranks named. `self` is the rank that recorded it (-1: unknown, "this rank").
std::string mismatchText(const dev::WaitRecord& r, int self);

}  // namespace weft
