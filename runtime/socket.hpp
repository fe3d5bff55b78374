// TCP sockets for the bootstrap. Every blocking call takes a deadline and throws weft::Error:
// kTimeout when it passes, kTransport when the peer closes, kSystem for other failures.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace weft::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadlineIn(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  std::string str() const;
  int family() const { return storage.ss_family; }
  int port() const;
  void setPort(int port);
};

// Resolves a numeric or named host; port may be 0. Throws kInvalidArgument naming `what`.
SockAddr resolveHost(const std::string& host, int port, const std::string& what);
// The address to advertise: `addr` if given, else the first IPv4 address of `ifname` if given,
// else the first non-loopback IPv4 interface, else 127.0.0.1.
SockAddr advertiseAddress(const std::string& addr, const std::string& ifname);

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  // Binds (SO_REUSEADDR) and listens, non-blocking; port 0 picks a free one.
  static Socket listenOn(const SockAddr& addr);
  // Connects, retrying while the listener is not up yet, until the deadline.
  static Socket connectTo(const SockAddr& addr, Deadline deadline);

  // Listener: the next waiting connection, or an invalid socket when none is waiting. Never blocks.
  Socket acceptNow();
  SockAddr localAddress() const;
  void sendAll(const void* data, size_t bytes, Deadline deadline);
  void recvAll(void* data, size_t bytes, Deadline deadline, const std::string& from);
  // Whatever has arrived, up to `bytes` (0 if nothing has). Never blocks; throws kTransport when the
  // peer has closed.
  size_t recvNow(void* data, size_t bytes, const std::string& from);

  int fd() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  bool valid() const { return fd_ >= 0; }
  void close();

 private:
  void waitFor(short events, Deadline deadline, const std::string& what);
  int fd_ = -1;
};

}  // namespace weft::net
