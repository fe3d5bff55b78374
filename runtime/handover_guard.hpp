// Bounds the one wait of the in-process persistent engine that no timeout covered: a caller's
// stream that waits for an op the resident kernel never starts. The stream writes the op's `ready`
// and then waits for its `done`, both in the stream itself, so a stream that never gets to write
// `ready` (a stream that shares the GPU's hardware queue with the resident kernel is held behind
// it for good: docs/design-notes.md, "The persistent engine and the GPU's hardware queues") or a
// kernel that never takes it would leave the caller's synchronisation waiting forever.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "common/periodic_thread.hpp"
#include "work_queue.hpp"

namespace weft {

class HandoverGuard {
 public:
  // Looks at `queue` every `periodNs`: where its oldest unfinished op has not been started by a
  // worker for `limitNs` since the guard first saw it oldest (since the op before it ended, or
  // since it was published), the communicator fails (kTimeout, naming the op and
  // WaitWhat::kHandover, with the op's `ready` word as seen; unless it has failed or been aborted
  // already, whose record stands) and `stopKernel` is called: it tells the kernel to leave, even
  // from inside an op, and returns whether it has left (a resident kernel may hold the very stream
  // that is to write `ready`). Once it has, every unfinished op is completed, as aborted, so that no
  // stream waits on it; until then the guard asks again at each look, since ops a kernel still runs
  // must not be completed under it. Ops published later are completed at the next look.
  // periodNs 0: no thread (tests call look()).
  HandoverGuard(WorkQueue& queue, uint64_t limitNs, uint64_t periodNs, std::function<bool()> stopKernel);
  ~HandoverGuard();
  HandoverGuard(const HandoverGuard&) = delete;
  HandoverGuard& operator=(const HandoverGuard&) = delete;

  // One look at time `nowNs` (CLOCK_MONOTONIC, as prim::nowNs). Returns whether the guard has fired.
  bool look(uint64_t nowNs);

 private:
  // After firing: completes what is left once the kernel has gone.
  void release();

  WorkQueue& queue_;
  const uint64_t limitNs_;
  const std::function<bool()> stopKernel_;
  std::optional<uint64_t> watched_;  // the oldest unstarted op, since watchedSinceNs_
  uint64_t watchedSinceNs_ = 0;
  bool fired_ = false;
  bool kernelGone_ = false;
  std::unique_ptr<PeriodicThread> thread_;  // last: it looks at the members above
};

}  // namespace weft
