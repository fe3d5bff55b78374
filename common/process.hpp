// Processes of this host as other processes can check them: a pid alone names a process only
// until it exits and the pid is reused, and only within one pid namespace.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "periodic_thread.hpp"

namespace weft {

struct ProcessIdentity {
  int32_t pid = 0;
  uint64_t start = 0;         // clock ticks since boot when it started (/proc/<pid>/stat), 0 unknown
  uint64_t pidNamespace = 0;  // the inode of its pid namespace, 0 unknown
  uint64_t host = 0;          // thisHostHash() of its host
};

// This process.
ProcessIdentity thisProcess();

// The start time of process `pid` in clock ticks since boot, or 0 if unknown.
uint64_t processStart(int pid);

// Whether `p`, a process of this pid namespace, has ended: its pid is gone, is a zombie (killed
// and not yet reaped by its parent) or now names a process that started later.
bool processEnded(const ProcessIdentity& p);

// hostname + boot id, hashed: equal exactly when two processes share a kernel.
uint64_t thisHostHash();

// Whether `p` is another process whose pid means something here: of this host and pid namespace.
bool watchable(const ProcessIdentity& p);

// A thread that looks at other processes of this host every `interval`: the proxy's watch of its
// host's peers and the communicator's of its p2p peers. Before each look it calls look() (may be
// empty); for each watched process found ended it calls ended(index, identity) once, and stops
// looking at all where that returns false. Identities that are not watchable are left alone.
class ProcessWatch {
 public:
  ProcessWatch(std::vector<ProcessIdentity> watched, std::chrono::milliseconds interval,
               std::function<bool(int, const ProcessIdentity&)> ended, std::function<void()> look = {});
  ~ProcessWatch();  // stops the thread at once (after a callback under way)
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;
  // Whether any of `watched` is watchable: a caller need not start a thread for none.
  static bool anyWatchable(const std::vector<ProcessIdentity>& watched);

 private:
  // One look: false once `ended_` has said to stop.
  bool lookOnce();

  std::vector<ProcessIdentity> watched_;
  std::function<bool(int, const ProcessIdentity&)> ended_;
  std::function<void()> look_;
  PeriodicThread thread_;  // last: it looks at the members above
};

}  // namespace weft
