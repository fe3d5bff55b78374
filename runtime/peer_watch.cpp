#include "peer_watch.hpp"

namespace weft {

PeerWatch::PeerWatch(std::vector<ProcessIdentity> watched, std::function<bool(int)> leftCleanly,
                     std::function<void(int, int)> ended, std::chrono::milliseconds interval)
    : watched_(std::move(watched)),
      leftCleanly_(std::move(leftCleanly)),
      ended_(std::move(ended)),
      interval_(interval),
      thread_([this] { run(); }) {}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void PeerWatch::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [&] { return stop_; })) {
    for (size_t r = 0; r < watched_.size(); ++r) {
      if (!watched_[r].pid || !processEnded(watched_[r])) continue;
      const int pid = watched_[r].pid;
      watched_[r] = ProcessIdentity{};
      if (leftCleanly_(static_cast<int>(r))) continue;
      ended_(static_cast<int>(r), pid);
      return;  // the communicator has failed: nothing more to tell
    }
  }
}

}  // namespace weft
