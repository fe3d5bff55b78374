// A weftd of a test's own: a private runtime directory (mkdtemp under /tmp, short enough for a
// socket path), the daemon started from the build tree, every wait on it bounded.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "runtime/service/client.hpp"

namespace weft::test {

class WeftdProcess {
 public:
  // Starts weftd on a fresh directory (`dir`: that directory instead) with `args` added, and waits
  // (at most 20 s) for its socket. started() says whether it came up; output() what it printed.
  explicit WeftdProcess(const std::vector<std::string>& args = {}, const std::string& dir = "");
  ~WeftdProcess();  // SIGKILLs it if still running, removes the directory it made
  WeftdProcess(const WeftdProcess&) = delete;
  WeftdProcess& operator=(const WeftdProcess&) = delete;

  bool started() const { return started_; }
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  std::string socket() const { return dir_ + "/weftd.sock"; }
  // Sends `sig` and waits at most `timeoutS` for the exit. Returns the exit status (>= 0), or
  // -signal where a signal ended it, or -1000 where it had not ended by then.
  int stop(int sig, double timeoutS);
  std::string output() const;

 private:
  std::string root_;  // what mkdtemp made (removed at the end)
  std::string dir_;
  std::string log_;
  pid_t pid_ = -1;
  bool started_ = false;
};

// weftd's answer to a status request (throws weft::Error where it does not answer).
service::Client::Status statusOf(const WeftdProcess& d);
// weftd lets a communicator go once its ranks have closed their connections, a moment after they
// exit: waits (at most 10 s) for it to hold no communicator and no memory.
bool releasesEverything(const WeftdProcess& d);

// Runs `command` through the shell, at most `timeoutS`; returns its output and sets *status.
std::string runCommand(const std::string& command, double timeoutS, int* status);

}  // namespace weft::test
