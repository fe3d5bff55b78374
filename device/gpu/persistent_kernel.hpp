#pragma once

#include "../comm_device.hpp"

namespace weft::dev {

// One launch per communicator; grid = resident workers, block = threads per worker.
__global__ void persistentKernel(CommView view, uint64_t firstTicket);

}  // namespace weft::dev
