#include "mps.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/log.hpp"

namespace weft::service {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kControl = "nvidia-cuda-mps-control";

// Runs nvidia-cuda-mps-control with `args`, the MPS directories in its environment and `input`
// on its standard input; waits at most `seconds`. Returns its exit status, or -1 where it could
// not run or did not end in time (then it is killed).
int runControl(const std::vector<std::string>& args, const std::string& pipeDir, const std::string& logDir,
               const std::string& input, double seconds) {
  int in[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(in[0]);
    ::close(in[1]);
    return -1;
  }
  if (pid == 0) {
    ::dup2(in[0], 0);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) {
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    ::setenv("CUDA_MPS_PIPE_DIRECTORY", pipeDir.c_str(), 1);
    if (!logDir.empty()) ::setenv("CUDA_MPS_LOG_DIRECTORY", logDir.c_str(), 1);
    std::vector<char*> argv{const_cast<char*>(kControl)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(kControl, argv.data());
    ::_exit(127);
  }
  ::close(in[0]);
  if (!input.empty()) {
    [[maybe_unused]] const ssize_t n = ::write(in[1], input.data(), input.size());
  }
  ::close(in[1]);
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (true) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (got < 0 && errno != EINTR) return -1;
    if (Clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

bool mpsAnswers(const std::string& pipeDir) {
  const std::string path = pipeDir + "/control";
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  // The control daemon's socket is not a stream one (a stream connect fails with EPROTOTYPE): each
  // kind is tried until one is not the wrong type.
  for (const int type : {SOCK_SEQPACKET, SOCK_STREAM, SOCK_DGRAM}) {
    const int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    const int err = errno;
    ::close(fd);
    if (ok) return true;
    if (err != EPROTOTYPE) return false;
  }
  return false;
}

Mps::Mps(const std::string& mode, const std::string& dir) {
  if (mode == "off") {
    what_ = "off (service_mps): ranks that share a GPU run their kernels by time slices";
    return;
  }
  const char* named = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string existing = named && *named ? named : "/tmp/nvidia-mps";
  if (mpsAnswers(existing)) {
    pipeDir_ = existing;
    what_ = "using the MPS control daemon at " + existing;
  } else {
    // Private directories: a daemon of this weftd's own, which it alone quits.
    const std::string pipeDir = dir + "/mps", logDir = dir + "/mps-log";
    for (const std::string& d : {pipeDir, logDir})
      if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
        what_ = "none: cannot make " + d + " (" + std::strerror(errno) + ")";
        WEFT_LOG(kWarn, kService, "MPS: {}", what_);
        return;
      }
    const int rc = runControl({"-d"}, pipeDir, logDir, "", 10.0);
    bool up = false;
    for (int i = 0; rc == 0 && i < 1000 && !(up = mpsAnswers(pipeDir)); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!up) {
      what_ = rc == 127 || rc < 0
                  ? std::string("none: ") + kControl + " could not be run (is it installed?)"
                  : std::string("none: ") + kControl + " -d did not start a daemon (its log: " + logDir + ")";
      WEFT_LOG(kWarn, kService, "MPS: {}; ranks that share a GPU run their kernels by time slices", what_);
      return;
    }
    started_ = true;
    pipeDir_ = pipeDir;
    what_ = "started an MPS control daemon at " + pipeDir + " (ranks export CUDA_MPS_PIPE_DIRECTORY=" + pipeDir +
            " before CUDA starts)";
  }
  // weftd's own CUDA work (the heaps it makes) goes through the same daemon.
  ::setenv("CUDA_MPS_PIPE_DIRECTORY", pipeDir_.c_str(), 1);
  WEFT_LOG(kInfo, kService, "MPS: {}", what_);
}

Mps::~Mps() {
  if (!started_) return;
  if (runControl({}, pipeDir_, "", "quit\n", 10.0) != 0)
    WEFT_LOG(kWarn, kService, "MPS: the control daemon at {} did not take quit", pipeDir_);
}

}  // namespace weft::service
