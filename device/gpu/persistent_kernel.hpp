#pragma once

#include "../comm_device.hpp"

namespace weft::dev {

// One launch per communicator (and again after an idle exit); grid = resident workers.
__global__ void persistentKernel(CommView view, uint64_t firstTicket);
// One launch per op, on the caller's stream.
__global__ void opKernel(CommView view, OpDesc desc, uint64_t ticket);

}  // namespace weft::dev
