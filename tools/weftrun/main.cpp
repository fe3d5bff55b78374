// weftrun: starts N ranks of a program on this host, the way torchrun does (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, plus WEFT_BOOTSTRAP_PORT and a fresh
// WEFT_BOOTSTRAP_SECRET), so that weft_comm_init_env joins them. If a rank fails, the others are
// stopped; the whole run is bounded by --timeout.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/socket.hpp"
#include "runtime/unique_id.hpp"

namespace {

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

void stopAll(const std::vector<pid_t>& pids, std::vector<bool>& alive) {
  for (size_t i = 0; i < pids.size(); ++i)
    if (alive[i]) kill(pids[i], SIGTERM);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    bool any = false;
    for (size_t i = 0; i < pids.size(); ++i)
      if (alive[i]) {
        if (waitpid(pids[i], nullptr, WNOHANG) == pids[i])
          alive[i] = false;
        else
          any = true;
      }
    if (!any) return;
    if (std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < pids.size(); ++i)
    if (alive[i]) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], nullptr, 0);
      alive[i] = false;
    }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weftrun: run N ranks of a weft program on this host"};
  int nranks = 0;
  double timeout = 600;
  std::string addr = "127.0.0.1";
  app.add_option("-n,--nranks", nranks, "Number of ranks")->required()->check(CLI::Range(1, 4096));
  app.add_option("-t,--timeout", timeout, "Seconds before every rank is stopped")->check(CLI::PositiveNumber);
  app.add_option("--addr", addr, "Address rank 0 listens on");
  app.prefix_command();
  app.footer("Usage: weftrun -n 4 -- program [args...]");
  CLI11_PARSE(app, argc, argv);
  std::vector<std::string> cmd = app.remaining();
  if (!cmd.empty() && cmd.front() == "--") cmd.erase(cmd.begin());
  if (cmd.empty()) {
    std::fprintf(stderr, "weftrun: no program given\n%s", app.help().c_str());
    return 2;
  }

  const std::string port = std::to_string(freePort(addr));
  const std::string secret = hex(weft::randomSecret());
  std::vector<pid_t> pids(nranks);
  std::vector<bool> alive(nranks, true);
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("weftrun: fork");
      alive.resize(r);
      pids.resize(r);
      stopAll(pids, alive);
      return 1;
    }
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nranks).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nranks).c_str(), 1);
      setenv("MASTER_ADDR", addr.c_str(), 1);
      setenv("WEFT_BOOTSTRAP_PORT", port.c_str(), 1);
      setenv("WEFT_BOOTSTRAP_SECRET", secret.c_str(), 1);
      std::vector<char*> args;
      for (auto& a : cmd) args.push_back(a.data());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      std::fprintf(stderr, "weftrun: cannot run %s: %s\n", args[0], strerror(errno));
      _exit(127);
    }
    pids[r] = pid;
  }

  int result = 0;
  int running = nranks;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  while (running > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < nranks; ++r)
        if (pids[r] == pid) {
          alive[r] = false;
          --running;
          const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          if (code != 0 && result == 0) {
            std::fprintf(stderr, "weftrun: rank %d %s %d; stopping the other ranks\n", r,
                         WIFEXITED(status) ? "exited with status" : "was killed by signal",
                         WIFEXITED(status) ? code : WTERMSIG(status));
            result = code;
            stopAll(pids, alive);
            running = 0;
          }
        }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "weftrun: timed out after %.0f s; stopping every rank\n", timeout);
      stopAll(pids, alive);
      return 124;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return result;
}
