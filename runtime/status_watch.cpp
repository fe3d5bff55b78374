#include "status_watch.hpp"

#include "device/primitives_device.hpp"

namespace weft {

using dev::Status;

StatusWatch::StatusWatch(status::Page& page, WorkQueue& queue, ReadItems readItems, std::chrono::milliseconds interval)
    : page_(page), queue_(queue), readItems_(std::move(readItems)) {
  if (interval.count() > 0)
    thread_ = std::make_unique<PeriodicThread>(interval, [this] {
      poll();
      return true;
    });
}

StatusWatch::~StatusWatch() = default;

void StatusWatch::submitted(const status::OpRow& row) {
  std::lock_guard<std::mutex> lock(mutex_);
  ops_.push_back(Op{row, 0, 0});
}

size_t StatusWatch::inFlight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ops_.size();
}

void StatusWatch::poll() {
  std::lock_guard<std::mutex> once(pollMutex_);
  const uint64_t now = status::monotonicNs();
  if (readItems_)
    pollLaunched(now);
  else
    pollPersistent(now);
}

Status StatusWatch::statusOf(uint64_t ticket, Status fallback) const {
  const dev::WaitRecord* first = firstFailure(*queue_.header());
  if (first && first->ticket == ticket) return static_cast<Status>(first->status);
  return fallback;
}

void StatusWatch::progressed(Op& op, uint64_t itemsDone, uint64_t now) {
  if (itemsDone > 0 && op.startNs == 0) op.startNs = now;
  if (itemsDone == op.itemsDone && op.startNs == 0) return;
  op.itemsDone = itemsDone;
  page_.progressed(op.row.ticket, op.itemsDone, op.startNs);
}

// Each op from its own slot: the engine writes `finished` per item and `done` (after `status`)
// when the op completes. A slot that took a later ticket since (done beyond this one's) means the
// op completed.
void StatusWatch::pollPersistent(uint64_t now) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = ops_.begin(); it != ops_.end();) {
    Op& op = *it;
    dev::QueueSlot& s = queue_.slots()[op.row.ticket % queue_.depth()];
    const uint64_t done = prim::atomicLoad<prim::Order::kAcquire>(&s.done);
    if (done >= op.row.ticket + 1) {
      const auto slotStatus = done == op.row.ticket + 1
                                  ? static_cast<Status>(prim::atomicLoad<prim::Order::kRelaxed>(&s.status))
                                  : Status::kOk;
      page_.ended(op.row.ticket, statusOf(op.row.ticket, slotStatus), queue_.header(), &op.row);
      it = ops_.erase(it);
      continue;
    }
    if (prim::atomicLoad<prim::Order::kAcquire>(&s.ready) == op.row.ticket + 1) {
      const uint64_t finished = prim::atomicLoad<prim::Order::kRelaxed>(&s.finished);
      if (op.startNs == 0 && opStarted(s, op.row.ticket)) op.startNs = now;
      progressed(op, finished, now);
    }
    ++it;
  }
}

// The launched kernels count items into one word, and ops run one after another in ticket order:
// the count beyond what the ended ops took covers the oldest op in flight first. The
// communicator's failure is read before the count, so that an op the count covers had finished
// every item before it: the first op the count does not cover is then the one that failed (or
// one behind it, which gives up at once).
void StatusWatch::pollLaunched(uint64_t now) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ops_.empty()) return;  // an idle communicator costs no copy
  }
  const Status failed = failureStatus(*queue_.header());
  const std::optional<uint64_t> count = readItems_();
  if (!count) return;
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t left = *count >= counted_ ? *count - counted_ : 0;
  bool first = true;
  while (!ops_.empty()) {
    Op& op = ops_.front();
    if (left >= op.row.nitems) {
      left -= op.row.nitems;
      counted_ += op.row.nitems;
      page_.ended(op.row.ticket, Status::kOk, queue_.header(), &op.row);
      ops_.pop_front();
      continue;
    }
    if (failed != Status::kOk) {
      page_.ended(op.row.ticket, statusOf(op.row.ticket, first ? failed : Status::kPeerFailed), queue_.header(),
                  &op.row);
      ops_.pop_front();
      first = false;
      continue;
    }
    progressed(op, left, now);
    break;
  }
}

}  // namespace weft
