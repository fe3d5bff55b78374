#include "periodic_thread.hpp"

namespace weft {

PeriodicThread::PeriodicThread(std::chrono::nanoseconds period, std::function<bool()> tick)
    : period_(period), tick_(std::move(tick)), thread_([this] { run(); }) {}

PeriodicThread::~PeriodicThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void PeriodicThread::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
    lock.unlock();
    const bool more = tick_();
    lock.lock();
    if (!more) return;
  }
}

}  // namespace weft
