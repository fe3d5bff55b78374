// The connecting side of weftd's socket: the library (service mode) and weftctl. Every call is
// bounded by the timeout given at connect and throws weft::Error; a refusal from weftd arrives as
// an Error of the code it sent, with its words.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "channel.hpp"
#include "transport/p2p/shm_segment.hpp"
#include "wire.hpp"

namespace weft::service {

class Client {
 public:
  // Connects to the weftd of `dir` and says hello. Returns null, with *st and *why, where no
  // weftd is there to answer (kAbsent, kStale, kDenied, kFailed; *why names the directory);
  // throws if one answers and refuses.
  static std::unique_ptr<Client> connect(const std::string& dir, Role role, double timeoutS, ConnectStatus* st,
                                         std::string* why);

  const Welcome& welcome() const { return welcome_; }

  struct Status {
    StatusHead head{};
    std::vector<StatusRow> rows;  // every other connection
  };
  Status status();

  // This rank's memory, mapped: heaps[r] is rank r's heap segment.
  struct Attachment {
    std::vector<transport::ShmSegment> heaps;
    transport::ShmSegment queue;
  };
  Attachment attach(const Attach& a);
  // The communicator ended cleanly here (weftd then does not fail its peers when this closes).
  // Never throws: a weftd that has gone has nothing to be told.
  void detach() noexcept;

 private:
  Client(Channel ch, double timeoutS) : ch_(std::move(ch)), timeoutS_(timeoutS) {}
  // The reply to a request: a message of `type`, or weftd's refusal thrown as an Error.
  Frame expect(MsgType type);

  Channel ch_;
  double timeoutS_;
  Welcome welcome_{};
};

}  // namespace weft::service
