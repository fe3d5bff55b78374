#include "weftd_process.hpp"

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.hpp"

namespace weft::test {

namespace {

// Whether weftd `pid` serves `dir`: it holds the lock (the file names it) and its socket accepts.
bool serving(const std::string& dir, pid_t pid) {
  std::ifstream lock(dir + "/weftd.lock");
  pid_t holder = 0;
  if (!(lock >> holder) || holder != pid) return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string path = dir + "/weftd.sock";
  if (path.size() >= sizeof a.sun_path) return false;
  memcpy(a.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

}  // namespace

WeftdProcess::WeftdProcess(const std::vector<std::string>& args, const std::string& dir) {
  char root[] = "/tmp/weftd-test-XXXXXX";
  if (!::mkdtemp(root)) return;
  root_ = root;
  dir_ = dir.empty() ? root_ + "/svc" : dir;
  log_ = root_ + "/weftd.log";
  // WEFT_TEST_WEFTD in the environment: a weftd elsewhere than the build's (a bundle on a GPU host).
  const char* binary = std::getenv("WEFT_TEST_WEFTD");
  std::vector<std::string> argv{binary ? binary : WEFT_TEST_WEFTD, "--dir", dir_, "--log-level", "info"};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = ::fork();
  if (pid_ == 0) {
    FILE* out = std::freopen(log_.c_str(), "w", stdout);
    if (out) ::dup2(::fileno(stdout), 2);
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (serving(dir_, pid_)) {
      started_ = true;
      return;
    }
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

WeftdProcess::~WeftdProcess() {
  if (pid_ > 0) stop(SIGKILL, 10);
  if (!root_.empty()) {
    int status = 0;
    runCommand("rm -rf '" + root_ + "'", 30, &status);
  }
}

int WeftdProcess::stop(int sig, double timeoutS) {
  if (pid_ <= 0) return -1000;
  ::kill(pid_, sig);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutS);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1000;
}

std::string WeftdProcess::output() const {
  std::ifstream in(log_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string runCommand(const std::string& command, double timeoutS, int* status) {
  const std::string bounded = "timeout -k 5 " + std::to_string(static_cast<int>(timeoutS)) + " " + command + " 2>&1";
  FILE* p = ::popen(bounded.c_str(), "r");
  std::string out;
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

service::Client::Status statusOf(const WeftdProcess& d) {
  service::ConnectStatus st;
  std::string why;
  auto c = service::Client::connect(d.dir(), service::Role::kCtl, 5, {}, &st, &why);
  if (!c) throw Error(Code::kSystem, why);
  return c->status();
}

bool releasesEverything(const WeftdProcess& d) {
  for (int i = 0; i < 1000; ++i) {
    const auto s = statusOf(d);
    if (s.head.comms == 0 && s.head.heldBytes == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace weft::test
