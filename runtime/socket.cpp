#include "socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.hpp"

namespace weft::net {

std::string SockAddr::str() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host, sizeof host);
  else if (family() == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, host, sizeof host);
  return (family() == AF_INET6 ? "[" + std::string(host) + "]" : std::string(host)) + ":" + std::to_string(port());
}

int SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::setPort(int port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(static_cast<uint16_t>(port));
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(static_cast<uint16_t>(port));
}

SockAddr resolveHost(const std::string& host, int port, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    throw Error(Code::kInvalidArgument, what + ": cannot resolve '" + host + "': " + gai_strerror(rc));
  SockAddr a;
  memcpy(&a.storage, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  freeaddrinfo(res);
  a.setPort(port);
  return a;
}

SockAddr advertiseAddress(const std::string& addr, const std::string& ifname) {
  if (!addr.empty()) return resolveHost(addr, 0, "bootstrap_addr");
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throwSystemError("getifaddrs");
  SockAddr found;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    const bool loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    if (ifname.empty() ? loopback : ifname != i->ifa_name) continue;
    memcpy(&found.storage, i->ifa_addr, sizeof(sockaddr_in));
    found.len = sizeof(sockaddr_in);
    break;
  }
  freeifaddrs(list);
  if (found.len) return found;
  if (!ifname.empty())
    throw Error(Code::kInvalidArgument, "bootstrap_ifname: no IPv4 address on interface '" + ifname + "'");
  return resolveHost("127.0.0.1", 0, "loopback");
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Socket Socket::listenOn(const SockAddr& addr) {
  Socket s(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) throwSystemError("socket");
  int one = 1;
  setsockopt(s.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s.fd_, reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0)
    throwSystemError("bind to " + addr.str());
  if (::listen(s.fd_, 1024) != 0) throwSystemError("listen on " + addr.str());
  return s;
}

Socket Socket::connectTo(const SockAddr& addr, Deadline deadline) {
  for (int attempt = 0;; ++attempt) {
    Socket s(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s.valid()) throwSystemError("socket");
    if (::connect(s.fd_, reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) == 0) {
      int one = 1;
      setsockopt(s.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return s;
    }
    const int err = errno;
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != ENETUNREACH && err != EHOSTUNREACH && err != EAGAIN)
      throw Error(Code::kSystem, systemErrorMessage("connect to " + addr.str(), err));
    if (Clock::now() > deadline)
      throw Error(Code::kTimeout, "bootstrap: nobody listens at " + addr.str() + " (is rank 0 running?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(attempt < 20 ? 10 : 100));
  }
}

void Socket::waitFor(short events, Deadline deadline, const std::string& what) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left < 0) throw Error(Code::kTimeout, "bootstrap: timed out waiting for " + what);
    pollfd p{fd_, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) throwSystemError("poll");
  }
}

Socket Socket::acceptNow() {
  for (;;) {
    Socket c(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (c.valid()) {
      int one = 1;
      setsockopt(c.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return c;
    }
    // A connection reset before it was accepted, or a shortage of descriptors, costs that one
    // connection only; the caller polls again.
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EPROTO || errno == EMFILE || errno == ENFILE ||
        errno == ENOBUFS || errno == ENOMEM)
      return Socket();
    throwSystemError("accept");
  }
}

SockAddr Socket::localAddress() const {
  SockAddr a;
  a.len = sizeof a.storage;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) throwSystemError("getsockname");
  return a;
}

void Socket::sendAll(const void* data, size_t bytes, Deadline deadline) {
  auto p = static_cast<const char*>(data);
  while (bytes) {
    waitFor(POLLOUT, deadline, "a peer to accept data");
    ssize_t n = ::send(fd_, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      if (errno == EPIPE || errno == ECONNRESET) throw Error(Code::kTransport, "bootstrap: peer closed the connection");
      throwSystemError("send");
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void Socket::recvAll(void* data, size_t bytes, Deadline deadline, const std::string& from) {
  auto p = static_cast<char*>(data);
  while (bytes) {
    waitFor(POLLIN, deadline, from);
    ssize_t n = ::recv(fd_, p, bytes, MSG_DONTWAIT);
    if (n == 0) throw Error(Code::kTransport, "bootstrap: " + from + " closed the connection (did it exit?)");
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      if (errno == ECONNRESET) throw Error(Code::kTransport, "bootstrap: " + from + " reset the connection");
      throwSystemError("recv");
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

size_t Socket::recvNow(void* data, size_t bytes, const std::string& from) {
  for (;;) {
    ssize_t n = ::recv(fd_, data, bytes, MSG_DONTWAIT);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) throw Error(Code::kTransport, "bootstrap: " + from + " closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == ECONNRESET) throw Error(Code::kTransport, "bootstrap: " + from + " reset the connection");
    throwSystemError("recv");
  }
}

}  // namespace weft::net
