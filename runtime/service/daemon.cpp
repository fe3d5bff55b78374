#include "daemon.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include "channel.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "mps.hpp"
#include "paths.hpp"
#include "registry.hpp"
#include "runtime/status_page.hpp"
#include "weft/version.h"

namespace weft::service {

namespace {

constexpr size_t kMaxConnections = 1024;
// A reply still queued this long after it was made, or a connection with more than this queued,
// has a client that does not read: it is dropped. Neither ever makes the loop wait.
constexpr double kReplyS = 0.5;
constexpr size_t kMaxQueuedBytes = 256 << 10;
// How long a map request may wait for weftd's kernels to leave the GPUs, so that the retired
// mapping of an allocation at the same address can be closed (CommRegistry::reclaim).
constexpr double kDeferredMapS = 2.0;

struct Conn {
  Channel ch;
  uint64_t id = 0;             // the detach ticket: never 0, never reused
  bool closing = false;        // a refusal is queued: nothing more is read, closed once it has left
  bool detachPending = false;  // the rank's engine is stopping; Detached goes once it has
  PeerCred cred;
  uint64_t connectedNs = 0;
  uint64_t idleSinceNs = 0;  // when the current message began, or the connection did
  bool greeted = false;
  Role role = Role::kCtl;
  bool attached = false;
  bool detached = false;
  uint64_t commId = 0;
  int rank = -1, nranks = 0;
  // The attached rank's process (pidfd), readable once it has ended. The connection alone does not
  // say so where the rank forked a child that kept the socket open.
  int pidFd = -1;
  // A map request answered once weftd has closed a retired mapping it collides with (the rank
  // waits for the reply).
  bool mapDeferred = false;
  MapMemory deferredMap{};
  uint64_t deferredSinceNs = 0;

  Conn() = default;
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  ~Conn() { closePidFd(); }
  void closePidFd() {
    if (pidFd >= 0) ::close(pidFd);
    pidFd = -1;
  }
};

// A pidfd of `pid`, or -1 where the kernel has none (before Linux 5.3) or the pid is not of this
// pid namespace (SO_PEERCRED gives 0): the connection closing is then the only sign of its end.
int openPidFd(pid_t pid) {
#if defined(SYS_pidfd_open)
  if (pid > 0) {
    const long fd = ::syscall(SYS_pidfd_open, pid, 0);
    if (fd >= 0) {
      ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
      return static_cast<int>(fd);
    }
  }
#else
  (void)pid;
#endif
  return -1;
}

// Queued: the loop sends it when the socket takes it (POLLOUT) and never waits for it.
void reply(Conn& c, MsgType type, const void* body, size_t bytes, const std::vector<int>& fds = {}) {
  c.ch.queue(type, body, bytes, fds);
}

void refuse(Conn& c, Code code, const std::string& why) {
  Refused r{};
  r.code = static_cast<int32_t>(code);
  putText(r.message, why);
  try {
    reply(c, MsgType::kRefused, &r, sizeof r);
  } catch (const Error&) {
  }
}

// A connection refused at accept: its socket's buffer is empty, so the refusal leaves whole now
// or not at all (the client has gone).
void flushOnce(Conn& c) {
  try {
    (void)c.ch.flush();
  } catch (const Error&) {
  }
}

}  // namespace

DaemonOptions DaemonOptions::from(const Settings& s) {
  DaemonOptions o;
  o.dir = directory(s);
  o.allowUids = parseIdList("service_allow_uids", s.getString("service_allow_uids"));
  o.allowGids = parseIdList("service_allow_gids", s.getString("service_allow_gids"));
  o.drainS = s.getDouble("service_drain_s");
  o.userClients = static_cast<int>(s.getInt("service_user_clients"));
  o.userBytes = static_cast<uint64_t>(s.getInt("service_user_bytes"));
  if (o.userBytes == 0) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    o.userBytes = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 2 : 0;
  }
  o.engineWorkers = static_cast<int>(s.getInt("service_engine_ctas"));
  o.engineIdleNs = static_cast<uint64_t>(s.getInt("service_engine_idle_us")) * 1000;
  o.mpsMode = std::string(WEFT_BUILD_GPU) == "cpu" ? "cpu" : s.getString("service_mps");
  if ((!o.allowUids.empty() || !o.allowGids.empty()) && o.dir == status::directory(s.getString("status_dir")))
    throw Error(Code::kInvalidArgument,
                "service_allow_uids/service_allow_gids: other users need a service_dir of its own (mode 0711); the "
                "status directory must stay 0700");
  return o;
}

struct Daemon::Impl {
  DaemonOptions opts;
  bool shared = false;  // other users allowed: directory 0711, socket 0666, SO_PEERCRED decides
  int lockFd = -1;
  int listenFd = -1;
  std::string socket;
  uint64_t startNs = status::monotonicNs();
  uint64_t instance = 0;
  std::vector<std::unique_ptr<Conn>> conns;
  std::unique_ptr<Mps> mps;  // outlives the registry: the GPU memory goes before a daemon weftd started quits
  CommRegistry registry;
  bool draining = false;
  uint64_t acceptPausedUntilNs = 0;  // out of descriptors: the listener rests until then
  uint64_t nextConnId = 1;
  std::string mpsText;  // for status

  void prepareDirectory();
  void takeLock();
  bool allowed(const PeerCred& p) const;
  void acceptAll();
  void handle(Conn& c, Frame& f);
  void sendStatus(Conn& c);
  void closeConn(Conn& c, const char* why);
  // The connection's rank, attached and not detached, went without detaching: its peers fail.
  void loseRank(Conn& c);
  // Fails the connection: its rank is lost, the refusal queued, and the connection closed once
  // that has left (or kReplyS has passed); at once where it was closing already.
  void drop(Conn& c, Code code, const std::string& why);
  // Sends what the socket takes; drops a connection whose client does not read.
  void serviceOutput(Conn& c);
  void answerDetaches();
  // Answers the deferred map requests whose retired mapping reclaim has closed, or that waited too long.
  void answerDeferredMaps(uint64_t now);
  bool anyAttached() const;
};

Daemon::Daemon(const DaemonOptions& o) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.opts = o;
  d.shared = !o.allowUids.empty() || !o.allowGids.empty();
  d.instance = (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  d.registry.limitUserBytes(o.userBytes);
  d.registry.limitEngineWorkers(o.engineWorkers);
  d.registry.setEngineIdleNs(o.engineIdleNs);
  d.prepareDirectory();
  d.takeLock();
  d.socket = socketPath(o.dir);
  // Holding the lock, a socket still there is a dead weftd's.
  if (::unlink(d.socket.c_str()) != 0 && errno != ENOENT)
    throw Error(Code::kSystem, systemErrorMessage("weftd: cannot remove the stale socket '" + d.socket + "'", errno));
  d.listenFd = listenUnix(d.socket, d.shared ? 0666 : 0600);
  // Under the lock only: a second weftd of this directory must not start a daemon of its own.
  if (o.mpsMode == "cpu")
    d.mpsText = "none (CPU backend: no GPU kernels to share)";
  else
    d.mpsText = (d.mps = std::make_unique<Mps>(o.mpsMode, o.dir))->describe();
  WEFT_LOG(kInfo, kService, "weftd {} (pid {}) serves {}{}", WEFT_VERSION_STRING, getpid(), d.socket,
           d.shared ? " (other users allowed by the configuration)" : "");
}

Daemon::~Daemon() {
  if (impl_->listenFd >= 0) {
    ::close(impl_->listenFd);
    ::unlink(impl_->socket.c_str());
  }
  impl_->conns.clear();
  if (impl_->lockFd >= 0) ::close(impl_->lockFd);
}

void Daemon::Impl::prepareDirectory() {
  const mode_t mode = shared ? 0711 : 0700;
  if (::mkdir(opts.dir.c_str(), mode) != 0 && errno != EEXIST)
    throw Error(Code::kSystem, systemErrorMessage("service_dir '" + opts.dir + "': cannot be created", errno));
  const int fd = ::open(opts.dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw Error(Code::kSystem, systemErrorMessage("service_dir '" + opts.dir + "'", errno));
  struct stat st {};
  std::string bad;
  if (::fstat(fd, &st) != 0)
    bad = systemErrorMessage("stat", errno);
  else if (st.st_uid != geteuid())
    bad = "owned by uid " + std::to_string(st.st_uid) + ", not by weftd's (" + std::to_string(geteuid()) + ")";
  else if ((st.st_mode & 022) != 0)
    bad = "writable by group or others";
  else if ((st.st_mode & 0777) != mode && ::fchmod(fd, mode) != 0)
    bad = systemErrorMessage("chmod", errno);
  ::close(fd);
  if (!bad.empty()) throw Error(Code::kSystem, "service_dir '" + opts.dir + "': " + bad);
}

void Daemon::Impl::takeLock() {
  const std::string path = lockPath(opts.dir);
  lockFd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lockFd < 0) throw Error(Code::kSystem, systemErrorMessage("weftd: lock file '" + path + "'", errno));
  if (::flock(lockFd, LOCK_EX | LOCK_NB) != 0) {
    char text[32] = {};
    const ssize_t n = ::pread(lockFd, text, sizeof text - 1, 0);
    const int holder = n > 0 ? atoi(text) : 0;
    throw Error(Code::kInvalidUsage, "another weftd" + (holder > 0 ? " (pid " + std::to_string(holder) + ")" : "") +
                                         " already serves " + opts.dir + " (it holds " + path + ")");
  }
  // The pid is for people and for the message above; the lock itself is the flock, which the
  // kernel drops with the process however it ends.
  const std::string pid = std::to_string(getpid()) + "\n";
  if (::ftruncate(lockFd, 0) != 0 || ::pwrite(lockFd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    throw Error(Code::kSystem, systemErrorMessage("weftd: lock file '" + path + "'", errno));
}

bool Daemon::Impl::allowed(const PeerCred& p) const {
  if (p.uid == geteuid()) return true;
  if (std::find(opts.allowUids.begin(), opts.allowUids.end(), p.uid) != opts.allowUids.end()) return true;
  for (uint32_t g : opts.allowGids) {
    if (p.gid == g) return true;
    if (std::find(p.groups.begin(), p.groups.end(), g) != p.groups.end()) return true;
  }
  return false;
}

void Daemon::Impl::acceptAll() {
  for (;;) {
    const int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
      // The waiting connection stays queued and the listener readable: without a rest the loop
      // would spin on it until a descriptor is free.
      WEFT_LOG(kWarn, kService, "out of file descriptors with {} connections; accepting again in 100 ms", conns.size());
      acceptPausedUntilNs = status::monotonicNs() + 100000000ull;
      return;
    }
    if (fd < 0) return;  // EAGAIN: none waiting; anything else is the client's connection only
    auto c = std::make_unique<Conn>();
    c->ch = Channel(fd);
    c->id = nextConnId++;
    c->connectedNs = c->idleSinceNs = status::monotonicNs();
    try {
      c->cred = c->ch.peer();
    } catch (const Error& e) {
      WEFT_LOG(kWarn, kService, "connection dropped: {}", e.what());
      continue;
    }
    if (!allowed(c->cred)) {
      WEFT_LOG(kWarn, kService, "refused pid {} of uid {}: not weftd's user, nor allowed by service_allow_uids/gids",
               c->cred.pid, c->cred.uid);
      refuse(*c, Code::kInvalidUsage,
             "weftd serves uid " + std::to_string(geteuid()) + " and the users its configuration allows; uid " +
                 std::to_string(c->cred.uid) + " is not one of them");
      flushOnce(*c);
      continue;
    }
    if (conns.size() >= kMaxConnections) {
      refuse(*c, Code::kOutOfMemory, "weftd has " + std::to_string(kMaxConnections) + " connections already");
      flushOnce(*c);
      continue;
    }
    // One user's connections, greeted or not, leave room for the others'.
    const auto held =
        std::count_if(conns.begin(), conns.end(), [&](const auto& k) { return k->cred.uid == c->cred.uid; });
    if (held >= opts.userClients) {
      WEFT_LOG(kWarn, kService, "refused pid {} of uid {}: the user holds {} connections (service_user_clients)",
               c->cred.pid, c->cred.uid, held);
      refuse(*c, Code::kOutOfMemory,
             "uid " + std::to_string(c->cred.uid) + " holds " + std::to_string(held) +
                 " connections to weftd already, its limit (service_user_clients)");
      flushOnce(*c);
      continue;
    }
    conns.push_back(std::move(c));
  }
}

void Daemon::Impl::handle(Conn& c, Frame& f) {
  std::string why;
  if (!c.greeted) {
    Hello h{};
    if (!decodeHello(f, &h, &why)) throw Error(Code::kInvalidUsage, "the first message must be a hello: " + why);
    c.greeted = true;
    c.role = static_cast<Role>(h.role);
    Welcome w{};
    w.pid = getpid();
    w.instance = instance;
    putText(w.version, WEFT_VERSION_STRING);
    reply(c, MsgType::kWelcome, &w, sizeof w);
    return;
  }
  switch (f.type) {
    case MsgType::kStatusRequest:
      sendStatus(c);
      return;
    case MsgType::kAttach: {
      Attach a{};
      if (!decodeAttach(f, &a, &why)) throw Error(Code::kInvalidArgument, why);
      if (c.role != Role::kLibrary || c.attached)
        throw Error(Code::kInvalidUsage, "attach: one communicator rank per library connection");
      if (draining) throw Error(Code::kInvalidUsage, "weftd is draining (SIGTERM) and attaches nothing new");
      Attached out{};
      const std::vector<int> fds = registry.attach(c.cred.uid, c.cred.pid, a, &out);
      c.attached = true;
      c.commId = a.commId;
      c.rank = a.rank;
      c.nranks = a.nranks;
      c.pidFd = openPidFd(c.cred.pid);
      reply(c, MsgType::kAttached, &out, sizeof out, fds);
      return;
    }
    case MsgType::kMapMemory: {
      MapMemory m{};
      if (!decodeMapMemory(f, &m, &why)) throw Error(Code::kInvalidArgument, why);
      if (!c.attached || c.detached) throw Error(Code::kInvalidUsage, "map memory: nothing attached");
      if (c.mapDeferred) throw Error(Code::kInvalidUsage, "map memory: a request is still being answered");
      // Memory weftd cannot map fails that op on the rank, not the rank: refused, still served.
      try {
        const MemoryMapped out{registry.mapMemory(c.cred.uid, c.commId, c.rank, m, /*mayDefer=*/true)};
        if (out.address == 0) {
          c.mapDeferred = true;
          c.deferredMap = m;
          c.deferredSinceNs = status::monotonicNs();
          return;
        }
        reply(c, MsgType::kMemoryMapped, &out, sizeof out, {});
      } catch (const Error& e) {
        refuse(c, e.code(), e.what());
      }
      return;
    }
    case MsgType::kWake:
      if (!c.attached || c.detached) throw Error(Code::kInvalidUsage, "wake: nothing attached");
      registry.wake(c.cred.uid, c.commId, c.rank);
      return;
    case MsgType::kDetach:
      if (!c.attached || c.detached) throw Error(Code::kInvalidUsage, "detach: nothing attached");
      // Detached is sent only once the rank's workers in weftd have exited (answerDetaches): the
      // rank then completes what they left unfinished, which must never race them.
      c.detached = true;
      c.detachPending = true;
      c.closePidFd();  // the rank is no longer weftd's to lose
      registry.detach(c.cred.uid, c.commId, c.rank, c.id);
      return;
    default:
      throw Error(Code::kInvalidUsage,
                  "message type " + std::to_string(static_cast<int>(f.type)) + " is not one a client sends");
  }
}

void Daemon::Impl::sendStatus(Conn& c) {
  StatusHead h{};
  h.pid = getpid();
  h.uptimeNs = status::monotonicNs() - startNs;
  h.instance = instance;
  h.comms = registry.comms();
  h.heldBytes = registry.heldBytes();
  putText(h.version, WEFT_VERSION_STRING);
  putText(h.mps, mpsText);
  putText(h.dir, opts.dir);
  std::vector<StatusRow> rows;
  const uint64_t now = status::monotonicNs();
  for (const auto& k : conns) {
    h.clients += k->role == Role::kLibrary && k->greeted;
    if (rows.size() == kMaxStatusRows || k.get() == &c) continue;
    // Another user sees only its own connections: which jobs run here, and whose, is weftd's
    // user's to know (and root's).
    if (c.cred.uid != ::geteuid() && c.cred.uid != 0 && k->cred.uid != c.cred.uid) continue;
    StatusRow r{};
    r.pid = k->cred.pid;
    r.uid = k->cred.uid;
    r.role = static_cast<uint32_t>(k->role);
    r.rank = k->attached && !k->detached ? k->rank : -1;
    r.nranks = k->nranks;
    r.commId = k->commId;
    r.connectedNs = now - k->connectedNs;
    rows.push_back(r);
  }
  h.rows = static_cast<uint32_t>(rows.size());
  std::vector<uint8_t> body(sizeof h + rows.size() * sizeof(StatusRow));
  memcpy(body.data(), &h, sizeof h);
  if (!rows.empty()) memcpy(body.data() + sizeof h, rows.data(), rows.size() * sizeof(StatusRow));
  reply(c, MsgType::kStatusReply, body.data(), body.size());
}

void Daemon::Impl::loseRank(Conn& c) {
  c.closePidFd();
  if (!c.attached || c.detached) return;
  registry.lost(c.cred.uid, c.commId, c.rank);
  c.attached = false;
}

void Daemon::Impl::closeConn(Conn& c, const char* why) {
  loseRank(c);
  WEFT_LOG(kDebug, kService, "connection of pid {} closed: {}", c.cred.pid, why);
  c.ch.close();
}

void Daemon::Impl::drop(Conn& c, Code code, const std::string& why) {
  if (c.closing) {
    closeConn(c, why.c_str());
    return;
  }
  loseRank(c);
  refuse(c, code, why);
  c.closing = true;
}

void Daemon::Impl::serviceOutput(Conn& c) {
  if (!c.ch.valid()) return;
  if (c.ch.queuedBytes() == 0 || c.ch.flush()) {
    if (c.closing) closeConn(c, "refused");
    return;
  }
  const double waited = std::chrono::duration<double>(net::Clock::now() - c.ch.oldestQueued()).count();
  if (c.ch.queuedBytes() > kMaxQueuedBytes || waited > kReplyS) {
    WEFT_LOG(kWarn, kService,
             "pid {} (uid {}): reads none of its replies ({} bytes queued, the oldest for {:.1f} s); "
             "connection dropped",
             c.cred.pid, c.cred.uid, c.ch.queuedBytes(), waited);
    closeConn(c, "its replies are not read");
  }
}

void Daemon::Impl::answerDeferredMaps(uint64_t now) {
  for (const auto& c : conns) {
    if (!c->mapDeferred || !c->ch.valid() || c->closing) continue;
    const bool late = now - c->deferredSinceNs > static_cast<uint64_t>(kDeferredMapS * 1e9);
    if (!late && registry.retiring(c->cred.uid, c->commId, c->rank)) continue;
    c->mapDeferred = false;
    try {
      const MemoryMapped out{registry.mapMemory(c->cred.uid, c->commId, c->rank, c->deferredMap, /*mayDefer=*/false)};
      reply(*c, MsgType::kMemoryMapped, &out, sizeof out, {});
    } catch (const Error& e) {
      refuse(*c, e.code(),
             std::string(e.what()) +
                 (late ? " (an allocation freed at this address is still mapped: weftd's kernels did not leave the "
                         "GPUs within " +
                             std::to_string(static_cast<int>(kDeferredMapS)) + " s)"
                       : std::string()));
    }
  }
}

void Daemon::Impl::answerDetaches() {
  for (uint64_t ticket : registry.takeDone())
    for (const auto& c : conns)
      if (c->id == ticket && c->ch.valid() && c->detachPending) {
        c->detachPending = false;
        if (!c->closing) reply(*c, MsgType::kDetached, nullptr, 0);
      }
}

bool Daemon::Impl::anyAttached() const {
  for (const auto& c : conns)
    if ((c->attached && !c->detached) || c->detachPending) return true;
  return registry.stopping() > 0;  // an engine still stopping: its memory is still held
}

void Daemon::serve(int stopFd) {
  Impl& d = *impl_;
  uint64_t drainEndNs = 0;
  std::vector<pollfd> fds;
  constexpr size_t kFirstConn = 3;  // stop pipe, listener, the reaper's completions
  for (;;) {
    fds.clear();
    // Once draining, the stop pipe (never read) would wake every poll at once: leave it out.
    fds.push_back({stopFd, static_cast<short>(d.draining ? 0 : POLLIN), 0});
    const bool accepting = d.listenFd >= 0 && status::monotonicNs() >= d.acceptPausedUntilNs;
    fds.push_back({d.listenFd, static_cast<short>(accepting ? POLLIN : 0), 0});
    fds.push_back({d.registry.doneFd(), POLLIN, 0});
    for (const auto& c : d.conns) {
      const short events = static_cast<short>((c->closing ? 0 : POLLIN) | (c->ch.queuedBytes() > 0 ? POLLOUT : 0));
      fds.push_back({c->ch.fd(), events, 0});
    }
    // Then each attached rank's process (conns[i]'s at kFirstConn + conns.size() + i; -1 is ignored).
    for (const auto& c : d.conns) fds.push_back({c->pidFd, POLLIN, 0});
    // Every wait below is this one: the loop blocks on no connection and on no engine.
    // A deferred map waits for the kernels to leave (a millisecond past their last op): look often.
    const bool deferred = std::any_of(d.conns.begin(), d.conns.end(), [](const auto& c) { return c->mapDeferred; });
    if (::poll(fds.data(), fds.size(), deferred ? 1 : 100) < 0 && errno != EINTR) throwSystemError("weftd: poll");
    const uint64_t now = status::monotonicNs();
    d.registry.checkEngines();
    d.registry.reclaim();
    d.answerDeferredMaps(now);
    if ((fds[0].revents & POLLIN) && !d.draining) {
      d.draining = true;
      drainEndNs = now + static_cast<uint64_t>(d.opts.drainS * 1e9);
      // New clients find no socket (service=auto runs them embedded) while the attached ones end.
      ::close(d.listenFd);
      ::unlink(d.socket.c_str());
      d.listenFd = -1;
      WEFT_LOG(kInfo, kService, "SIGTERM: draining (at most {} s for attached communicators)", d.opts.drainS);
    }
    if (fds[2].revents & POLLIN) d.answerDetaches();
    if (d.draining && (!d.anyAttached() || now >= drainEndNs)) {
      if (d.anyAttached()) WEFT_LOG(kWarn, kService, "drain time is up with communicators still attached; exiting");
      // The last replies (Detached) leave if the sockets take them now; nobody is waited for.
      for (const auto& c : d.conns) flushOnce(*c);
      return;
    }
    if (d.listenFd >= 0 && (fds[1].revents & POLLIN)) d.acceptAll();
    const size_t polled = (fds.size() - kFirstConn) / 2;  // accepted connections come next turn
    for (size_t i = 0; i < d.conns.size() && i < polled; ++i) {
      Conn& c = *d.conns[i];
      const short revents = fds[i + kFirstConn].revents;
      try {
        if (c.closing && (revents & (POLLHUP | POLLERR))) {
          d.closeConn(c, "closed by the client before its refusal was read");
          continue;
        }
        if (!c.closing && (revents & (POLLIN | POLLHUP | POLLERR))) {
          const bool open = c.ch.readNow();
          Frame f;
          while (c.ch.valid() && !c.closing && c.ch.takeFrame(&f)) {
            d.handle(c, f);
            c.idleSinceNs = now;
          }
          if (!open) d.closeConn(c, "closed by the client");
        }
        if (c.ch.valid() && !c.closing && c.ch.midMessage() &&
            now - c.idleSinceNs > static_cast<uint64_t>(d.opts.ioTimeoutS * 1e9))
          throw Error(Code::kTimeout, "a message was begun and not finished within " +
                                          std::to_string(static_cast<int>(d.opts.ioTimeoutS)) + " s");
        if (c.ch.valid() && !c.closing && !c.greeted &&
            now - c.connectedNs > static_cast<uint64_t>(d.opts.ioTimeoutS * 1e9))
          throw Error(Code::kTimeout, "no hello within " + std::to_string(static_cast<int>(d.opts.ioTimeoutS)) + " s");
      } catch (const Error& e) {
        WEFT_LOG(kWarn, kService, "pid {} (uid {}): {}; connection dropped", c.cred.pid, c.cred.uid, e.what());
        d.drop(c, e.code(), e.what());
      } catch (const std::exception& e) {
        // Out of threads or memory while serving one client: that client fails, weftd goes on.
        WEFT_LOG(kError, kService, "pid {} (uid {}): {}; connection dropped", c.cred.pid, c.cred.uid, e.what());
        d.drop(c, Code::kSystem, e.what());
      }
      try {
        d.serviceOutput(c);
      } catch (const Error& e) {
        d.closeConn(c, e.what());  // the client has gone: nothing to tell it
      }
      if (!c.ch.midMessage() && c.greeted) c.idleSinceNs = now;
      // The rank's process has ended and its connection showed nothing this turn (a process that
      // ends closes its socket first, and that close was handled above): a child it forked holds
      // the connection.
      if (c.ch.valid() && c.pidFd >= 0 && (fds[kFirstConn + polled + i].revents & POLLIN) &&
          !(revents & (POLLIN | POLLHUP | POLLERR))) {
        WEFT_LOG(kWarn, kService,
                 "pid {} (rank {} of communicator {:016x}) has ended with its connection still open "
                 "(a child it forked holds it)",
                 c.cred.pid, c.rank, c.commId);
        d.closeConn(c, "the rank's process has ended");
      }
    }
    d.conns.erase(std::remove_if(d.conns.begin(), d.conns.end(), [](const auto& c) { return !c->ch.valid(); }),
                  d.conns.end());
  }
}

}  // namespace weft::service
