// The status watch: on a GPU backend an op ends on the caller's stream, so no host thread waits on
// it and sees it end. A thread of the communicator's own brings its status page up to date
// instead: every interval it reads how far the engine got, from words the engine keeps anyway, and
// records each op's items done, start, end and status (the page's rows, history and counters).
// Nothing on an op's path waits for it.
//   persistent engine: each op's queue slot (items finished, done, status), in host memory;
//   launched engine:   the items the eager op kernels finished, all ops together, copied from the
//                      device (Engine::itemsFinished). Ops run one after another in ticket order,
//                      so the count covers the oldest op in flight first.
// Ops captured into graphs take no ticket and never appear on the page; the launched kernels do
// not count their items either.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "common/periodic_thread.hpp"

#include "status_page.hpp"
#include "work_queue.hpp"

namespace weft {

class StatusWatch {
 public:
  // The launched engine's count of items finished (nullopt: not read this time). Empty for the
  // persistent engine, whose queue slots are read instead.
  using ReadItems = std::function<std::optional<uint64_t>()>;

  // interval 0: no thread (poll() is called by hand: the unit tests).
  StatusWatch(status::Page& page, WorkQueue& queue, ReadItems readItems, std::chrono::milliseconds interval);
  ~StatusWatch();  // stops the thread
  StatusWatch(const StatusWatch&) = delete;
  StatusWatch& operator=(const StatusWatch&) = delete;

  // An op is on its way to the engine: its row as the page recorded it at submit (its ticket, and
  // in nitems the items the engine runs it as, Engine::itemsOf). Called in ticket order.
  void submitted(const status::OpRow& row);
  // Brings the page up to date once.
  void poll();
  // Ops submitted and not yet seen to end.
  size_t inFlight() const;

 private:
  struct Op {
    status::OpRow row;  // as submitted: its ticket, and its items in nitems
    uint64_t itemsDone;
    uint64_t startNs;
  };
  void pollPersistent(uint64_t now);
  void pollLaunched(uint64_t now);
  // The op's status where the queue's failure record names it (a slot reused since may no longer
  // hold it), else `fallback`.
  dev::Status statusOf(uint64_t ticket, dev::Status fallback) const;
  void progressed(Op& op, uint64_t itemsDone, uint64_t now);

  status::Page& page_;
  WorkQueue& queue_;
  const ReadItems readItems_;
  mutable std::mutex mutex_;
  std::deque<Op> ops_;                      // in ticket order
  uint64_t counted_ = 0;                    // launched: the count at which every op before ops_.front() had ended
  std::mutex pollMutex_;                    // one poll at a time
  std::unique_ptr<PeriodicThread> thread_;  // last: it polls with the members above
};

}  // namespace weft
