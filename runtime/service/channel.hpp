// One end of a connection on weftd's Unix socket: whole messages (wire.hpp) out and in, file
// descriptors beside them (SCM_RIGHTS), the peer's credentials (SO_PEERCRED). Every blocking call
// takes a deadline and throws weft::Error: kTimeout when it passes, kTransport when the peer has
// gone or sent something malformed, kSystem for other failures.
#pragma once

#include <sys/types.h>

#include <deque>
#include <string>
#include <vector>

#include "runtime/socket.hpp"
#include "wire.hpp"

namespace weft::service {

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (SO_PEERGROUPS), where the kernel tells them
};

// How connecting to a socket path went.
enum class ConnectStatus {
  kOk,
  kAbsent,  // no socket there: no weftd serves that directory
  kStale,   // a socket nobody listens on (a weftd that died)
  kDenied,  // the directory or socket is not ours to use
  kFailed,  // anything else (*why says)
};

class Channel {
 public:
  Channel() = default;
  explicit Channel(int fd) : fd_(fd) {}
  Channel(Channel&& o) noexcept : fd_(o.fd_), reader_(std::move(o.reader_)), out_(std::move(o.out_)) { o.fd_ = -1; }
  Channel& operator=(Channel&& o) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel() { close(); }

  static Channel connect(const std::string& path, ConnectStatus* status, std::string* why);

  // Sends a message, `fds` beside its first byte. The descriptors stay the caller's.
  void send(MsgType type, const void* body, size_t bodyBytes, net::Deadline deadline, const std::vector<int>& fds = {});
  // The next whole message.
  Frame receive(net::Deadline deadline);

  // The outbound queue, for a loop that must never wait on one peer (weftd's). queue() encodes a
  // message and duplicates `fds` (the caller's may close at once); flush() never blocks: it sends
  // what the socket takes now and returns whether nothing is left queued, throwing kTransport
  // where the peer has gone. Messages leave whole and in order.
  void queue(MsgType type, const void* body, size_t bodyBytes, const std::vector<int>& fds = {});
  bool flush();
  size_t queuedBytes() const;
  // When the oldest message still (partly) queued was queued; meaningless when none is.
  net::Deadline oldestQueued() const { return out_.empty() ? net::Clock::now() : out_.front().queuedAt; }
  // Never blocks: reads what has arrived (at most one message's worth) into the reader. Returns
  // false when the peer has closed; throws kTransport on a malformed message.
  bool readNow();
  // The reader's next whole message, if one has arrived (after readNow).
  bool takeFrame(Frame* out);
  // Whether part of a message has arrived and the rest has not.
  bool midMessage() const { return reader_.partial(); }

  PeerCred peer() const;
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();

 private:
  struct Outgoing {
    std::vector<uint8_t> bytes;
    std::vector<int> fds;  // duplicates, closed once sent (or with the channel)
    size_t sent = 0;
    net::Deadline queuedAt;
  };
  static void dropFds(Outgoing& m);

  int fd_ = -1;
  FrameReader reader_;
  std::deque<Outgoing> out_;
};

// Binds and listens on `path` (removing nothing: the caller holds the lock and cleared it), with
// the socket's mode set to `mode`. Returns the listening descriptor. Throws weft::Error.
int listenUnix(const std::string& path, unsigned mode);

}  // namespace weft::service
