#include "channel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"

namespace weft::service {

namespace {

sockaddr_un addressOf(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    throw Error(Code::kInvalidArgument, "service_dir: the socket path '" + path + "' is longer than " +
                                            std::to_string(sizeof a.sun_path - 1) + " bytes");
  memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

int remainingMs(net::Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now()).count();
  return left <= 0 ? 0 : left > 1000 ? 1000 : static_cast<int>(left);
}

// Waits for `events` on fd until the deadline (in slices, so a signal cannot stretch it).
void waitFor(int fd, short events, net::Deadline deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remainingMs(deadline));
    if (n > 0) return;
    if (n < 0 && errno != EINTR) throwSystemError(std::string("weftd socket: poll while waiting to ") + what);
    if (net::Clock::now() >= deadline)
      throw Error(Code::kTimeout, std::string("weftd socket: timed out waiting to ") + what);
  }
}

}  // namespace

Channel& Channel::operator=(Channel&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    reader_ = std::move(o.reader_);
    out_ = std::move(o.out_);
    o.fd_ = -1;
  }
  return *this;
}

void Channel::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  for (Outgoing& m : out_) dropFds(m);
  out_.clear();
}

void Channel::dropFds(Outgoing& m) {
  for (int fd : m.fds) ::close(fd);
  m.fds.clear();
}

void Channel::queue(MsgType type, const void* body, size_t bodyBytes, const std::vector<int>& fds) {
  if (fds.size() > kMaxFds)
    throw Error(Code::kInternal, "a message with " + std::to_string(fds.size()) + " descriptors (at most " +
                                     std::to_string(kMaxFds) + ")");
  Outgoing m;
  m.bytes = encode(type, body, bodyBytes, static_cast<uint32_t>(fds.size()));
  m.queuedAt = net::Clock::now();
  for (int fd : fds) {
    // The registry may close its descriptor before the message leaves (a rank lost meanwhile).
    const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) {
      const int err = errno;
      dropFds(m);
      throw Error(Code::kSystem, systemErrorMessage("weftd socket: duplicating a descriptor to send", err));
    }
    m.fds.push_back(dup);
  }
  out_.push_back(std::move(m));
}

size_t Channel::queuedBytes() const {
  size_t total = 0;
  for (const Outgoing& m : out_) total += m.bytes.size() - m.sent;
  return total;
}

bool Channel::flush() {
  while (!out_.empty()) {
    Outgoing& o = out_.front();
    iovec iov{o.bytes.data() + o.sent, o.bytes.size() - o.sent};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    if (o.sent == 0 && !o.fds.empty()) {
      m.msg_control = control;
      m.msg_controllen = CMSG_SPACE(sizeof(int) * o.fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * o.fds.size());
      memcpy(CMSG_DATA(c), o.fds.data(), sizeof(int) * o.fds.size());
    }
    const ssize_t n = ::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      // The descriptors went with the first byte.
      dropFds(o);
      o.sent += static_cast<size_t>(n);
      if (o.sent == o.bytes.size()) out_.pop_front();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
      throw Error(Code::kTransport, "weftd socket: the other side has closed the connection");
    throwSystemError("weftd socket: sendmsg");
  }
  return true;
}

Channel Channel::connect(const std::string& path, ConnectStatus* status, std::string* why) {
  const sockaddr_un a = addressOf(path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throwSystemError("weftd socket: socket()");
  // A local connect either completes or fails at once (a full backlog: EAGAIN), so it never waits.
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
    *status = ConnectStatus::kOk;
    return Channel(fd);
  }
  const int err = errno;
  ::close(fd);
  *status = err == ENOENT || err == ENOTDIR ? ConnectStatus::kAbsent
            : err == ECONNREFUSED           ? ConnectStatus::kStale
            : err == EACCES || err == EPERM ? ConnectStatus::kDenied
                                            : ConnectStatus::kFailed;
  *why = systemErrorMessage("weftd socket '" + path + "'", err);
  return Channel();
}

void Channel::send(MsgType type, const void* body, size_t bodyBytes, net::Deadline deadline,
                   const std::vector<int>& fds) {
  if (fds.size() > kMaxFds)
    throw Error(Code::kInternal, "a message with " + std::to_string(fds.size()) + " descriptors (at most " +
                                     std::to_string(kMaxFds) + ")");
  const std::vector<uint8_t> bytes = encode(type, body, bodyBytes, static_cast<uint32_t>(fds.size()));
  size_t sent = 0;
  while (sent < bytes.size()) {
    iovec iov{const_cast<uint8_t*>(bytes.data()) + sent, bytes.size() - sent};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    if (sent == 0 && !fds.empty()) {
      m.msg_control = control;
      m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t n = ::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      waitFor(fd_, POLLOUT, deadline, "send");
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
      throw Error(Code::kTransport, "weftd socket: the other side has closed the connection");
    throwSystemError("weftd socket: sendmsg");
  }
}

bool Channel::readNow() {
  const size_t want = reader_.want();
  if (want == 0) return true;  // a whole frame, or a bad one, waits to be taken
  uint8_t buf[4096];
  iovec iov{buf, want < sizeof buf ? want : sizeof buf};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(fd_, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  if (n < 0 && errno == ECONNRESET) return false;
  if (n < 0) throwSystemError("weftd socket: recvmsg");
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
  // Descriptors beyond the buffer were dropped by the kernel: the message cannot be whole.
  const bool truncated = (m.msg_flags & MSG_CTRUNC) != 0;
  if (n == 0 && fds.empty()) return false;
  reader_.feed(buf, static_cast<size_t>(n), std::move(fds));
  if (truncated) {
    Frame drop;
    std::string why;
    reader_.next(&drop, &why);
    throw Error(Code::kTransport, "weftd socket: more descriptors arrived than a message may carry");
  }
  return true;
}

bool Channel::takeFrame(Frame* out) {
  std::string why;
  switch (reader_.next(out, &why)) {
    case FrameReader::Result::kFrame:
      return true;
    case FrameReader::Result::kBad:
      throw Error(Code::kTransport, "weftd socket: malformed message: " + why);
    default:
      return false;
  }
}

Frame Channel::receive(net::Deadline deadline) {
  Frame f;
  for (;;) {
    if (takeFrame(&f)) return f;
    waitFor(fd_, POLLIN, deadline, "receive");
    if (!readNow()) throw Error(Code::kTransport, "weftd socket: the other side has closed the connection");
  }
}

PeerCred Channel::peer() const {
  PeerCred p;
  ucred c{};
  socklen_t len = sizeof c;
  if (getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0) throwSystemError("weftd socket: SO_PEERCRED");
  p.pid = c.pid;
  p.uid = c.uid;
  p.gid = c.gid;
#ifdef SO_PEERGROUPS
  gid_t groups[256];
  socklen_t glen = sizeof groups;
  if (getsockopt(fd_, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0)
    p.groups.assign(groups, groups + glen / sizeof(gid_t));
#endif
  return p;
}

int listenUnix(const std::string& path, unsigned mode) {
  const sockaddr_un a = addressOf(path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throwSystemError("weftd: socket()");
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::chmod(path.c_str(), mode) != 0 ||
      ::listen(fd, 128) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(Code::kSystem, systemErrorMessage("weftd: cannot listen on '" + path + "'", err));
  }
  return fd;
}

}  // namespace weft::service
