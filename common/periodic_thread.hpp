// A thread that does one thing at a fixed period until its owner goes: the loop of the watchers
// that look at a queue, a status page or other processes (StatusWatch, HandoverGuard,
// ProcessWatch).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace weft {

class PeriodicThread {
 public:
  // Calls `tick` every `period` (the first after one period) until it returns false or this is
  // destroyed. The destructor wakes the thread at once and joins it, after a tick under way: an
  // owner declares it after every member the tick uses, so that it stops before they go.
  PeriodicThread(std::chrono::nanoseconds period, std::function<bool()> tick);
  ~PeriodicThread();
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

 private:
  void run();

  const std::chrono::nanoseconds period_;
  const std::function<bool()> tick_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace weft
