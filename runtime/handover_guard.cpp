#include "handover_guard.hpp"

#include <chrono>

#include "common/log.hpp"
#include "device/primitives_device.hpp"

namespace weft {

HandoverGuard::HandoverGuard(WorkQueue& queue, uint64_t timeoutNs, uint64_t periodNs, std::function<void()> stopKernel)
    : queue_(queue), timeoutNs_(timeoutNs), stopKernel_(std::move(stopKernel)) {
  if (periodNs > 0) thread_ = std::thread([this, periodNs] { run(periodNs); });
}

HandoverGuard::~HandoverGuard() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HandoverGuard::run(uint64_t periodNs) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::nanoseconds(periodNs), [this] { return stopping_; })) {
    lock.unlock();
    look(prim::nowNs());
    lock.lock();
  }
}

bool HandoverGuard::look(uint64_t nowNs) {
  const dev::QueueHeader& h = *queue_.header();
  if (fired_) {
    // The kernel was told to leave: an op a submitter published meanwhile has nobody to run it.
    if (queue_.inFlight() != 0) queue_.completeUnfinished();
    return true;
  }
  const uint64_t oldest = prim::atomicLoad<prim::Order::kAcquire>(&h.completed);
  if (oldest >= prim::atomicLoad<prim::Order::kAcquire>(&h.tail)) {
    watched_.reset();
    return false;
  }
  const dev::QueueSlot& s = queue_.slots()[oldest % queue_.depth()];
  // Started: a worker claimed an item of it (from then on the op's waits are the kernel's own, each
  // bounded), or it is already done.
  const uint64_t claim = prim::atomicLoad<prim::Order::kRelaxed>(&s.claim);
  const bool started =
      static_cast<uint32_t>(claim >> 32) == static_cast<uint32_t>(oldest) && static_cast<uint32_t>(claim) != 0;
  if (started || prim::atomicLoad<prim::Order::kAcquire>(&s.done) >= oldest + 1) {
    watched_.reset();
    return false;
  }
  if (watched_ != oldest) {
    watched_ = oldest;
    watchedSinceNs_ = nowNs;
    return false;
  }
  if (nowNs - watchedSinceNs_ < timeoutNs_) return false;
  const uint64_t ready = prim::atomicLoad<prim::Order::kAcquire>(&s.ready);
  queue_.recordHostFailure(oldest, dev::Status::kTimeout, oldest + 1, ready, dev::WaitWhat::kHandover);
  WEFT_LOG(kError, kEngine,
           "op #{} was not started by the persistent kernel in {} s ({}): the communicator fails, its kernel is "
           "stopped and its unfinished ops are completed so that no stream waits on them",
           oldest, static_cast<double>(timeoutNs_) * 1e-9,
           ready == oldest + 1 ? "its stream had handed it over" : "its stream never handed it over");
  fired_ = true;
  stopKernel_();
  queue_.completeUnfinished();
  return true;
}

}  // namespace weft
