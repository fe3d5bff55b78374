#pragma once

#include "../comm_device.hpp"

namespace weft::dev {

// One launch per communicator (and again after an idle exit); grid = resident workers.
__global__ void persistentKernel(CommView view, uint64_t firstTicket);
// One launch per op, on the caller's stream (eager or captured into a graph).
__global__ void opKernel(CommView view, OpDesc desc);

}  // namespace weft::dev
