// Bounds the one wait of the in-process persistent engine that no timeout covered: a caller's
// stream that waits for an op the resident kernel never starts. The stream writes the op's `ready`
// and then waits for its `done`, both in the stream itself, so a stream that never gets to write
// `ready` (a stream that shares the GPU's hardware queue with the resident kernel is held behind
// it for good: docs/design-notes.md, "The persistent engine and the GPU's hardware queues") or a
// kernel that never takes it would leave the caller's synchronisation waiting forever.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "work_queue.hpp"

namespace weft {

class HandoverGuard {
 public:
  // Looks at `queue` every `periodNs`: where its oldest unfinished op has not been started by a
  // worker for `timeoutNs`, the communicator fails (kTimeout, naming the op and WaitWhat::kHandover,
  // with the op's `ready` word as seen), `stopKernel` is called (it tells the kernel to leave and
  // returns once it has, or its own bound has passed: a resident kernel may hold the stream that
  // is to write `ready`), and every unfinished op is completed, as aborted, so that no stream waits
  // on it; ops published after that are completed at the next look. periodNs 0: no thread (tests
  // call look()).
  HandoverGuard(WorkQueue& queue, uint64_t timeoutNs, uint64_t periodNs, std::function<void()> stopKernel);
  ~HandoverGuard();
  HandoverGuard(const HandoverGuard&) = delete;
  HandoverGuard& operator=(const HandoverGuard&) = delete;

  // One look at time `nowNs` (CLOCK_MONOTONIC, as prim::nowNs). Returns whether the guard has fired.
  bool look(uint64_t nowNs);

 private:
  void run(uint64_t periodNs);

  WorkQueue& queue_;
  const uint64_t timeoutNs_;
  const std::function<void()> stopKernel_;
  std::optional<uint64_t> watched_;  // the oldest unstarted op, since watchedSinceNs_
  uint64_t watchedSinceNs_ = 0;
  bool fired_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace weft
