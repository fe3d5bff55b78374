// weftd's service: one per runtime directory (a lock file), a Unix socket there, one loop that
// admits connections by their credentials (SO_PEERCRED), answers status requests and attaches
// communicators (registry.hpp). Everything a connection sends is untrusted: a malformed, oversized
// or stalled message costs that connection only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/config.hpp"

namespace weft::service {

struct DaemonOptions {
  std::string dir;                  // runtime directory
  std::vector<uint32_t> allowUids;  // besides weftd's own
  std::vector<uint32_t> allowGids;  // primary or supplementary group of the peer
  double drainS = 30;               // SIGTERM: how long attached communicators may take to end
  double ioTimeoutS = 5;            // a message begun must be whole within this
  std::string mpsMode;              // service_mps (auto, off), or "cpu" where the build has no GPU
  // What one user may hold: connections open at once, and bytes of memory weftd makes for its
  // communicators (service_user_clients, service_user_bytes; 0 bytes: half the physical memory).
  int userClients = 256;
  uint64_t userBytes = 0;
  int engineWorkers = 32;           // service_engine_ctas: the most workers of an engine weftd runs
  uint64_t engineIdleNs = 1000000;  // service_engine_idle_us: a GPU engine's idle time before it leaves

  static DaemonOptions from(const Settings& s);
};

class Daemon {
 public:
  // Takes the directory's lock and listens. Throws weft::Error: kInvalidUsage naming the pid of
  // the weftd that holds the lock; kSystem where the directory is unsafe or unusable.
  explicit Daemon(const DaemonOptions& o);
  ~Daemon();  // removes the socket; the lock goes with the process
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Serves until `stopFd` becomes readable (the signal handler writes to it), then stops
  // accepting, waits at most drainS for attached communicators to end, and returns.
  void serve(int stopFd);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::service
