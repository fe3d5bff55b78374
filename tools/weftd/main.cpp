// weftd: the per-node weft service. Started once per node (systemd, or `srun --ntasks-per-node=1
// --overlap weftd &` in a Slurm job); serves the communicators of this node's ranks over a Unix
// socket in its runtime directory (service_dir). SIGTERM or SIGINT: stop accepting, let attached
// communicators end (service_drain_s at most), exit 0.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "common/log.hpp"
#include "runtime/config.hpp"
#include "runtime/service/daemon.hpp"
#include "weft/version.h"

namespace {

int gStopWrite = -1;

// Async-signal-safe: one byte into the pipe the serving loop polls.
void onStop(int) {
  const int saved = errno;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(gStopWrite, &byte, 1);
  errno = saved;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weftd: the per-node weft service"};
  std::string configFile, dir, logLevel;
  app.add_option("-c,--config", configFile, "Config file (as WEFT_CONFIG_FILE; conf/weftd.toml is a sample)");
  app.add_option("-d,--dir", dir, "Runtime directory (as service_dir)");
  app.add_option("-l,--log-level", logLevel, "error, warn, info, debug or trace (as log_level)");
  app.set_version_flag("-V,--version", std::string("weftd ") + WEFT_VERSION_STRING);
  CLI11_PARSE(app, argc, argv);
  // weftd keeps persistent kernels resident; a kernel loaded lazily afterwards on the same GPU
  // (CUDA's default) waits for them to leave, which they never do while a rank is attached.
  ::setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  try {
    if (!configFile.empty()) ::setenv("WEFT_CONFIG_FILE", configFile.c_str(), 1);
    std::map<std::string, std::string> given;
    if (!dir.empty()) given["service_dir"] = dir;
    if (!logLevel.empty()) given["log_level"] = logLevel;
    // weftd logs what it does by default; log_level below info only where asked.
    if (logLevel.empty() && !std::getenv("WEFT_LOG_LEVEL")) given["log_level"] = "info";
    const weft::Settings s = weft::Settings::resolve(given);
    weft::log::configure(s.getString("log_level"), s.getString("log_subsys"), s.getString("log_file"));
    int pipeFds[2];
    if (::pipe2(pipeFds, O_CLOEXEC | O_NONBLOCK) != 0) weft::throwSystemError("weftd: pipe");
    gStopWrite = pipeFds[1];
    struct sigaction sa {};
    sa.sa_handler = onStop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
    // Each connection and each attached rank's memory holds descriptors: take what the hard limit allows.
    struct rlimit files {};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &files);
    }
    weft::service::Daemon daemon(weft::service::DaemonOptions::from(s));
    daemon.serve(pipeFds[0]);
    WEFT_LOG(kInfo, kService, "weftd (pid {}) exits", getpid());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weftd: %s\n", e.what());
    return 1;
  }
  return 0;
}
