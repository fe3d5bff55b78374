// weftrun: starts N ranks of a program on this host, the way torchrun does (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, plus WEFT_BOOTSTRAP_PORT and a fresh
// WEFT_BOOTSTRAP_SECRET), so that weft_comm_init_env joins them. If a rank fails, the others are
// stopped; the whole run is bounded by --timeout. The ranks form a process group of their own;
// SIGINT, SIGTERM and SIGHUP sent to weftrun are passed on to it (SIGKILL follows 5 s later), and
// weftrun exits only once every rank is reaped, then dies of the same signal. A rank whose weftrun
// dies anyway (SIGKILL) gets SIGKILL itself (PR_SET_PDEATHSIG).
//
// More ranks than GPUs share them (a rank takes GPU LOCAL_RANK % GPUs): their kernels, whose blocks
// wait on each other's, run side by side only under MPS with each client limited to its share of
// the SMs, so weftrun sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / (ranks per GPU) for every rank
// where the user has not set it (MPS reads it when CUDA starts in the rank, before weft could), and
// CUDA_MODULE_LOADING = EAGER: under MPS a kernel's first launch with lazy loading waits for the
// device's work to drain, a peer's spinning kernel included, which may be waiting on this rank.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "common/gpus_visible.hpp"
#include "runtime/socket.hpp"
#include "runtime/unique_id.hpp"
#include "transport/p2p/shm_segment.hpp"

namespace {

using Clock = std::chrono::steady_clock;

std::string hex(const weft::Secret& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (uint8_t b : s) {
    out += d[b >> 4];
    out += d[b & 15];
  }
  return out;
}

int freePort(const std::string& addr) {
  weft::net::Socket s = weft::net::Socket::listenOn(weft::net::resolveHost(addr, 0, "--addr"));
  return s.localAddress().port();
}

// The signals weftrun waits for; blocked from the start, taken with sigtimedwait.
sigset_t waitedSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  return set;
}

const char* signalName(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

void onChild(int) {}  // SIGCHLD must not be ignored for sigtimedwait to see it

struct Death {
  int rank;
  int status;
};

class Ranks {
 public:
  explicit Ranks(int n) : pids_(n, 0), alive_(n, false) {}

  // Forks rank `r`, which joins the ranks' process group and execs `cmd`.
  bool start(int r, std::vector<std::string>& cmd, const std::vector<std::pair<std::string, std::string>>& env,
             const sigset_t& unblocked) {
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
      setpgid(0, pgid_);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // weftrun died before the line above
      sigprocmask(SIG_SETMASK, &unblocked, nullptr);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      // Debian's libfabric loads libinfinipath, whose constructor takes SIGTERM, SIGINT, SIGSEGV
      // and SIGBUS for a handler that mallocs a backtrace: a rank stopped by SIGTERM then died in
      // it with heap corruption instead of exiting. The variable keeps the handler out (the user's
      // own setting wins).
      setenv("IPATH_NO_BACKTRACE", "1", 0);
      std::vector<char*> args;
      for (auto& a : cmd) args.push_back(a.data());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      std::fprintf(stderr, "weftrun: cannot run %s: %s\n", args[0], strerror(errno));
      _exit(127);
    }
    setpgid(pid, pgid_);  // also here, so the group exists before the next fork, whoever runs first
    if (pgid_ == 0) pgid_ = pid;
    pids_[r] = pid;
    alive_[r] = true;
    ++running_;
    return true;
  }

  int running() const { return running_; }

  // Reaps every rank that has ended; returns them.
  std::vector<Death> reap() {
    std::vector<Death> out;
    for (;;) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) return out;
      for (size_t r = 0; r < pids_.size(); ++r)
        if (alive_[r] && pids_[r] == pid) {
          ended(r);
          out.push_back({static_cast<int>(r), status});
        }
    }
  }

  // Sends `sig` to each rank and, while its leader (rank 0) is unreaped and so holds the group's
  // id, to the group: that reaches what the ranks started.
  void signalAll(int sig) {
    if (pgid_ > 0 && alive_[0]) kill(-pgid_, sig);
    for (size_t r = 0; r < pids_.size(); ++r)
      if (alive_[r]) kill(pids_[r], sig);
  }

  // `sig` to every rank, SIGKILL to what is left after `graceS` seconds (at once if weftrun is
  // signalled again meanwhile), and every rank reaped. Returns the first signal that came meanwhile.
  int stopAll(int sig, double graceS) {
    int signalled = 0;
    if (running_ > 0) signalAll(sig);
    const sigset_t set = waitedSignals();
    const auto until = Clock::now() + std::chrono::duration<double>(graceS);
    while (running_ > 0 && Clock::now() < until) {
      const timespec tick{0, 20 * 1000 * 1000};
      const int got = sigtimedwait(&set, nullptr, &tick);
      if (got > 0 && got != SIGCHLD) {
        signalled = got;
        break;
      }
      reap();
    }
    signalAll(SIGKILL);
    for (size_t r = 0; r < pids_.size(); ++r)
      if (alive_[r]) {
        waitpid(pids_[r], nullptr, 0);
        ended(r);
      }
    return signalled;
  }

 private:
  // Rank r is reaped: the shared memory it made and had not yet unlinked (it died during init)
  // goes with it.
  void ended(size_t r) {
    alive_[r] = false;
    --running_;
    weft::transport::ShmSegment::removeOf(pids_[r]);
  }

  std::vector<pid_t> pids_;
  std::vector<bool> alive_;
  pid_t pgid_ = 0;
  int running_ = 0;
};

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// Among ranks found dead together, one killed by a signal is the likelier cause: the others
// usually exit with an error when they find it gone.
const Death* firstFailure(const std::vector<Death>& deaths) {
  const Death* first = nullptr;
  for (const Death& d : deaths)
    if (failed(d.status) && (!first || (WIFSIGNALED(d.status) && !WIFSIGNALED(first->status)))) first = &d;
  return first;
}

[[noreturn]] void dieOf(int sig) {
  signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
  _exit(128 + sig);
}

int run(int nranks, int gpus, double timeout, const std::string& addr, std::vector<std::string>& cmd) {
  const std::string port = std::to_string(freePort(addr));
  std::vector<std::pair<std::string, std::string>> common = {{"WORLD_SIZE", std::to_string(nranks)},
                                                             {"LOCAL_WORLD_SIZE", std::to_string(nranks)},
                                                             {"MASTER_ADDR", addr},
                                                             {"WEFT_BOOTSTRAP_PORT", port},
                                                             {"WEFT_BOOTSTRAP_SECRET", hex(weft::randomSecret())}};
  const int sharers = weft::ranksPerGpu(nranks, gpus);
  if (const int percent = weft::mpsSharePercent(nranks, gpus);
      percent > 0 && !std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")) {
    const std::string share = std::to_string(percent);
    common.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", share);
    std::fprintf(stderr,
                 "weftrun: %d ranks on %d GPU(s), up to %d a GPU: each rank gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s "
                 "(their kernels run side by side only under MPS: nvidia-cuda-mps-control -d)\n",
                 nranks, gpus, sharers, share.c_str());
  }
  if (sharers > 1 && !std::getenv("CUDA_MODULE_LOADING")) {
    common.emplace_back("CUDA_MODULE_LOADING", "EAGER");
    std::fprintf(stderr,
                 "weftrun: ranks share GPUs: each rank gets CUDA_MODULE_LOADING=EAGER (a kernel loaded at its first "
                 "launch would wait for the other ranks' kernels)\n");
  }
  const sigset_t set = waitedSignals();
  sigset_t before;
  sigprocmask(SIG_BLOCK, &set, &before);
  signal(SIGCHLD, onChild);
  Ranks ranks(nranks);
  for (int r = 0; r < nranks; ++r) {
    auto env = common;
    env.emplace_back("RANK", std::to_string(r));
    env.emplace_back("LOCAL_RANK", std::to_string(r));
    if (!ranks.start(r, cmd, env, before)) {
      perror("weftrun: fork");
      ranks.stopAll(SIGTERM, 5);
      return 1;
    }
  }

  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
  while (ranks.running() > 0) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      std::fprintf(stderr, "weftrun: timed out after %.0f s; stopping every rank\n", timeout);
      const int sig = ranks.stopAll(SIGTERM, 5);
      if (sig) dieOf(sig);
      return 124;
    }
    const auto wait = std::min<Clock::duration>(left, std::chrono::seconds(1));
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0 && sig != SIGCHLD) {
      std::fprintf(stderr, "weftrun: got %s; passing it on to every rank\n", signalName(sig));
      ranks.stopAll(sig, 5);
      dieOf(sig);
    }
    const std::vector<Death> deaths = ranks.reap();
    if (const Death* d = firstFailure(deaths)) {
      const bool exited = WIFEXITED(d->status);
      std::fprintf(stderr, "weftrun: rank %d %s %d; stopping the other ranks\n", d->rank,
                   exited ? "exited with status" : "was killed by signal",
                   exited ? WEXITSTATUS(d->status) : WTERMSIG(d->status));
      const int again = ranks.stopAll(SIGTERM, 5);
      if (again) dieOf(again);
      return exited ? WEXITSTATUS(d->status) : 128 + WTERMSIG(d->status);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weftrun: run N ranks of a weft program on this host"};
  int nranks = 0;
  double timeout = 600;
  std::string addr = "127.0.0.1";
  int gpus = -1;
  app.add_option("-n,--nranks", nranks, "Number of ranks")->required()->check(CLI::Range(1, 4096));
  app.add_option("--gpus", gpus,
                 "GPUs the ranks share, for their MPS share (default: the NVIDIA GPUs this host shows them)")
      ->check(CLI::Range(0, 4096));
  app.add_option("-t,--timeout", timeout, "Seconds before every rank is stopped")->check(CLI::PositiveNumber);
  app.add_option("--addr", addr, "Address rank 0 listens on");
  app.prefix_command();
  app.footer("The program and its arguments follow the options: weftrun -n 4 [--] program [args...]");
  CLI11_PARSE(app, argc, argv);
  std::vector<std::string> cmd = app.remaining();
  if (!cmd.empty() && cmd.front() == "--") cmd.erase(cmd.begin());
  if (cmd.empty()) {
    std::fprintf(stderr, "weftrun: no program given\n%s", app.help().c_str());
    return 2;
  }
  try {
    return run(nranks, gpus >= 0 ? gpus : weft::nvidiaGpusVisible(), timeout, addr, cmd);
  } catch (const weft::Error& e) {
    std::fprintf(stderr, "weftrun: %s\n", e.what());
    return 1;
  }
}
