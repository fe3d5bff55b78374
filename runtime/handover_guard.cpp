#include "handover_guard.hpp"

#include <chrono>

#include "common/log.hpp"
#include "device/primitives_device.hpp"

namespace weft {

HandoverGuard::HandoverGuard(WorkQueue& queue, uint64_t limitNs, uint64_t periodNs, std::function<bool()> stopKernel)
    : queue_(queue), limitNs_(limitNs), stopKernel_(std::move(stopKernel)) {
  if (periodNs > 0)
    thread_ = std::make_unique<PeriodicThread>(std::chrono::nanoseconds(periodNs), [this] {
      look(prim::nowNs());
      return true;
    });
}

HandoverGuard::~HandoverGuard() = default;

void HandoverGuard::release() {
  if (!kernelGone_) kernelGone_ = stopKernel_();
  if (kernelGone_ && queue_.inFlight() != 0) queue_.completeUnfinished();
}

bool HandoverGuard::look(uint64_t nowNs) {
  if (fired_) {
    release();
    return true;
  }
  const dev::QueueHeader& h = *queue_.header();
  const uint64_t oldest = prim::atomicLoad<prim::Order::kAcquire>(&h.completed);
  if (oldest >= prim::atomicLoad<prim::Order::kAcquire>(&h.tail)) {
    watched_.reset();
    return false;
  }
  const dev::QueueSlot& s = queue_.slots()[oldest % queue_.depth()];
  // Started (from then on the op's waits are the kernel's own, each bounded), or already done.
  if (opStarted(s, oldest) || prim::atomicLoad<prim::Order::kAcquire>(&s.done) >= oldest + 1) {
    watched_.reset();
    return false;
  }
  if (watched_ != oldest) {
    watched_ = oldest;
    watchedSinceNs_ = nowNs;
    return false;
  }
  if (nowNs - watchedSinceNs_ < limitNs_) return false;
  const uint64_t ready = prim::atomicLoad<prim::Order::kAcquire>(&s.ready);
  // A communicator that failed or was aborted keeps its own record (and error code).
  if (failureStatus(h) == dev::Status::kOk && prim::atomicLoad<prim::Order::kAcquire>(&h.abort) == 0)
    queue_.recordHostFailure(oldest, dev::Status::kTimeout, oldest + 1, ready, dev::WaitWhat::kHandover);
  WEFT_LOG(kError, kEngine,
           "op #{} was not started by the persistent kernel in {} s ({}): the communicator fails, its kernel is "
           "stopped and its unfinished ops are completed so that no stream waits on them",
           oldest, static_cast<double>(limitNs_) * 1e-9,
           ready == oldest + 1 ? "its stream had handed it over" : "its stream never handed it over");
  fired_ = true;
  release();
  return true;
}

}  // namespace weft
