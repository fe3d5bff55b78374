// The processes of a communicator's peers on this host, looked at from a thread of the rank's
// own: embedded mode's counterpart of weftd seeing its ranks' connections close. A peer that ends
// without destroying the communicator fails its ops at once, instead of at timeout_s.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/process.hpp"

namespace weft {

class PeerWatch {
 public:
  // watched[r]: rank r's process (pid 0: not watched). Every `interval` the thread looks at each;
  // for the first that has ended and did not leave cleanly (leftCleanly(r) false) it calls
  // ended(r, pid) once, and then stops looking. One that left cleanly is no longer watched.
  PeerWatch(std::vector<ProcessIdentity> watched, std::function<bool(int)> leftCleanly,
            std::function<void(int, int)> ended, std::chrono::milliseconds interval);
  ~PeerWatch();  // stops the thread (at once)
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

 private:
  void run();

  std::vector<ProcessIdentity> watched_;
  std::function<bool(int)> leftCleanly_;
  std::function<void(int, int)> ended_;
  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace weft
