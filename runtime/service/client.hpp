// The connecting side of weftd's socket: the library (service mode) and weftctl. Every call is
// bounded by the timeout given at connect and throws weft::Error; a refusal from weftd arrives as
// an Error of the code it sent, with its words.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "channel.hpp"
#include "transport/p2p/shm_segment.hpp"
#include "wire.hpp"

namespace weft::service {

class Client {
 public:
  // Connects to the weftd of `dir` and says hello. Returns null, with *st and *why, where no
  // weftd is there to answer (kAbsent, kStale, kDenied, kFailed; *why names the directory);
  // throws if one answers and refuses, or if the process listening there runs as a user this one
  // does not trust: only this user, root, and `trustedUids` (service_trust_uids) may hold a job's
  // memory, since whoever listens on the socket makes it.
  static std::unique_ptr<Client> connect(const std::string& dir, Role role, double timeoutS,
                                         const std::vector<uint32_t>& trustedUids, ConnectStatus* st, std::string* why);

  const Welcome& welcome() const { return welcome_; }

  struct Status {
    StatusHead head{};
    std::vector<StatusRow> rows;  // every other connection
  };
  Status status();

  // This rank's memory: heapFds[r] is rank r's heap segment's descriptor (held open by `reply`
  // until the Attachment goes; the backend maps them: HeapMemory); the queue, mapped; where weftd
  // runs the engine, the staging segment and where weftd sees this rank's heap and staging.
  struct Attachment {
    Frame reply;
    std::vector<int> heapFds;
    uint32_t engineInWeftd = 0;  // Attached::engineInWeftd
    uint32_t engineWorkers = 0;  // Attached::engineWorkers
    transport::ShmSegment queue;
    transport::ShmSegment staging;
    uint64_t weftdHeapBase = 0, weftdStagingBase = 0;
  };
  Attachment attach(const Attach& a);
  // Where weftd's GPU engine maps an allocation of this rank's device memory (`handle`, its IPC
  // handle; [base, base + bytes), where it lies here), mapping it there first. Thread-safe;
  // bounded by the timeout.
  uint64_t mapMemory(const unsigned char (&handle)[64], uint64_t base, uint64_t bytes);
  // Asks weftd to start its engine of this rank again (its GPU kernel left on idle). No reply:
  // a launch that fails fails the communicator (weftd's engine fault). Thread-safe; bounded.
  void wake();
  // The communicator ended cleanly here (weftd then does not fail its peers when this closes) and
  // weftd's engine of the rank has stopped once this returns (bounded by the timeout). Never
  // throws: a weftd that has gone has nothing to be told.
  void detach() noexcept;
  // Calls `onGone` once, from a thread of its own, if weftd goes away (the connection closes)
  // before detach. weftd sends nothing unasked, so anything to read means it has gone.
  void watch(std::function<void()> onGone);
  ~Client();

 private:
  Client(Channel ch, double timeoutS) : ch_(std::move(ch)), timeoutS_(timeoutS) {}
  // The reply to a request: a message of `type`, or weftd's refusal thrown as an Error.
  Frame expect(MsgType type);

  void stopWatching();

  Channel ch_;
  double timeoutS_;
  std::thread watcher_;
  std::atomic<bool> watching_{false};
  std::mutex requestMutex_;  // one request and its reply at a time
  Welcome welcome_{};
};

}  // namespace weft::service
