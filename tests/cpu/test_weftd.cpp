// weftd on its own: it answers status, keeps one instance per directory, drains and exits on
// SIGTERM, leaves a directory a new weftd takes over, refuses malformed, oversized and stalled
// messages and users it does not serve, and goes on serving through all of it.
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.hpp"
#include "runtime/service/client.hpp"
#include "support/weftd_process.hpp"
#include "weft/version.h"
#include "weft/weft.h"

namespace weft::test {
namespace {

using service::Channel;
using service::Client;
using service::ConnectStatus;
using service::Role;

std::unique_ptr<Client> connectTo(const WeftdProcess& d, ConnectStatus* st, std::string* why) {
  return Client::connect(d.dir(), Role::kCtl, 5, {}, st, why);
}

// Whether weftd answers a status request, as weftctl would ask it.
bool answers(const WeftdProcess& d) {
  ConnectStatus st;
  std::string why;
  auto c = connectTo(d, &st, &why);
  return c && c->status().head.pid == d.pid();
}

// Sends raw bytes on a fresh connection and returns weftd's refusal text ("" if none came), having
// seen the connection closed after it.
std::string refusalFor(const WeftdProcess& d, const std::vector<uint8_t>& bytes, const std::vector<int>& fds = {}) {
  ConnectStatus st;
  std::string why;
  Channel ch = Channel::connect(d.socket(), &st, &why);
  EXPECT_TRUE(ch.valid()) << why;
  if (!ch.valid()) return "";
  msghdr m{};
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  if (!fds.empty()) {
    m.msg_control = control;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  EXPECT_EQ(::sendmsg(ch.fd(), &m, MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  try {
    service::Frame f = ch.receive(net::deadlineIn(10));
    service::Refused r{};
    EXPECT_TRUE(service::decodeRefused(f, &r, &why)) << why;
    // Then weftd closes the connection.
    EXPECT_THROW(ch.receive(net::deadlineIn(10)), Error);
    return r.message;
  } catch (const Error& e) {
    ADD_FAILURE() << "no refusal: " << e.what();
    return "";
  }
}

std::vector<uint8_t> rawHeader(uint32_t magic, uint16_t version, uint16_t type, uint32_t body) {
  const service::Header h{magic, version, type, body, 0};
  std::vector<uint8_t> out(sizeof h);
  memcpy(out.data(), &h, sizeof h);
  return out;
}

// Rank 0's attach of a communicator: 8 queue slots and inbox slots, 64 KiB tiles and one-shot
// area, a 5 s timeout; the rest as given, with the engine in weftd where a staging segment is.
service::Attach attachOf(uint64_t commId, int32_t nranks, uint64_t heapBytes, uint32_t workers, uint64_t stagingBytes) {
  service::Attach a{};
  a.commId = commId;
  a.rank = 0;
  a.nranks = nranks;
  a.heapBytes = heapBytes;
  a.queueDepth = 8;
  a.workers = workers;
  a.inboxSlots = 8;
  a.tileBytes = 64 << 10;
  a.oneShotBytes = 64 << 10;
  a.timeoutNs = 5'000'000'000;
  a.stagingBytes = stagingBytes;
  a.engineInWeftd = stagingBytes > 0 ? 1 : 0;
  return a;
}

TEST(Weftd, StatusNamesPidVersionAndUptime) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  ConnectStatus st;
  std::string why;
  auto c = connectTo(d, &st, &why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->welcome().pid, d.pid());
  const Client::Status s = c->status();
  EXPECT_EQ(s.head.pid, d.pid());
  EXPECT_STREQ(s.head.version, WEFT_VERSION_STRING);
  EXPECT_EQ(std::string(s.head.dir), d.dir());
  EXPECT_GT(s.head.uptimeNs, 0u);
  EXPECT_EQ(s.head.clients, 0u);
  EXPECT_EQ(s.head.comms, 0u);
  EXPECT_NE(std::string(s.head.mps).find("CPU backend"), std::string::npos);
  int rc = 0;
  const std::string out = runCommand(std::string(WEFT_TEST_WEFTCTL) + " status --dir " + d.dir(), 30, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("pid " + std::to_string(d.pid())), std::string::npos) << out;
  EXPECT_NE(out.find(std::string("weftd ") + WEFT_VERSION_STRING), std::string::npos) << out;
  struct stat dirStat {};
  ASSERT_EQ(::stat(d.dir().c_str(), &dirStat), 0);
  EXPECT_EQ(dirStat.st_mode & 0777, 0700u);
}

TEST(Weftd, OneDaemonPerDirectory) {
  WeftdProcess first;
  ASSERT_TRUE(first.started()) << first.output();
  WeftdProcess second({}, first.dir());
  EXPECT_FALSE(second.started());
  EXPECT_NE(second.output().find("another weftd (pid " + std::to_string(first.pid()) + ")"), std::string::npos)
      << second.output();
  EXPECT_TRUE(answers(first));
}

TEST(Weftd, SigtermExitsAndRemovesItsSocket) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  EXPECT_EQ(d.stop(SIGTERM, 20), 0) << d.output();
  struct stat st {};
  EXPECT_NE(::lstat(d.socket().c_str(), &st), 0);
  int rc = 0;
  const std::string out = runCommand(std::string(WEFT_TEST_WEFTCTL) + " status --dir " + d.dir(), 30, &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("no socket there"), std::string::npos) << out;
}

TEST(Weftd, ANewDaemonTakesOverFromAKilledOne) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  EXPECT_EQ(d.stop(SIGKILL, 20), -SIGKILL);
  ConnectStatus st;
  std::string why;
  EXPECT_FALSE(connectTo(d, &st, &why));
  EXPECT_EQ(st, ConnectStatus::kStale) << why;
  WeftdProcess again({}, d.dir());
  ASSERT_TRUE(again.started()) << again.output();
  EXPECT_TRUE(answers(again));
}

TEST(Weftd, MalformedAndOversizedMessagesAreRefused) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  using service::kWireMagic;
  using service::kWireVersion;
  EXPECT_NE(refusalFor(d, rawHeader(0x12345678, kWireVersion, 1, 40)).find("bad magic"), std::string::npos);
  EXPECT_NE(refusalFor(d, rawHeader(kWireMagic, 99, 1, 40)).find("protocol version 99"), std::string::npos);
  EXPECT_NE(refusalFor(d, rawHeader(kWireMagic, kWireVersion, 77, 0)).find("unknown message type 77"),
            std::string::npos);
  EXPECT_NE(refusalFor(d, rawHeader(kWireMagic, kWireVersion, 1, 1u << 30)).find("over the limit"), std::string::npos);
  EXPECT_NE(refusalFor(d, rawHeader(kWireMagic, kWireVersion, 1, 12)).find("expected 40"), std::string::npos);
  // A request before the hello.
  EXPECT_NE(refusalFor(d, rawHeader(kWireMagic, kWireVersion, 4, 0)).find("must be a hello"), std::string::npos);
  // A hello whose role is unknown.
  std::vector<uint8_t> hello = rawHeader(kWireMagic, kWireVersion, 1, sizeof(service::Hello));
  service::Hello h{};
  h.role = 9;
  hello.insert(hello.end(), reinterpret_cast<uint8_t*>(&h), reinterpret_cast<uint8_t*>(&h) + sizeof h);
  EXPECT_NE(refusalFor(d, hello).find("unknown role 9"), std::string::npos);
  // Descriptors where none belong.
  h.role = 2;
  memcpy(hello.data() + sizeof(service::Header), &h, sizeof h);
  const int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_NE(refusalFor(d, hello, {devNull}).find("descriptors"), std::string::npos);
  ::close(devNull);
  EXPECT_TRUE(answers(d));
  EXPECT_EQ(::kill(d.pid(), 0), 0);
}

TEST(Weftd, AStalledMessageCostsOnlyItsConnection) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  ConnectStatus st;
  std::string why;
  Channel ch = Channel::connect(d.socket(), &st, &why);
  ASSERT_TRUE(ch.valid()) << why;
  const std::vector<uint8_t> half = rawHeader(service::kWireMagic, service::kWireVersion, 1, 40);
  ASSERT_EQ(::send(ch.fd(), half.data(), 8, MSG_NOSIGNAL), 8);
  // Others are served meanwhile.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(answers(d));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  // The stalled one is answered with a refusal, then closed, within weftd's bound of 5 s.
  service::Frame f = ch.receive(net::deadlineIn(15));
  service::Refused r{};
  ASSERT_TRUE(service::decodeRefused(f, &r, &why)) << why;
  EXPECT_NE(std::string(r.message).find("not finished within"), std::string::npos) << r.message;
  EXPECT_TRUE(answers(d));
}

// A client that sends requests and never reads the replies fills its socket; weftd queues what
// does not fit, drops the connection once the queue is over its bound or a reply has waited too
// long, and meanwhile answers everyone else at once: the loop waits on no connection.
TEST(Weftd, AClientThatNeverReadsDelaysNoOtherClient) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  ConnectStatus st;
  std::string why;
  auto good = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
  ASSERT_TRUE(good) << why;
  // Each hog asks for many status replies (hundreds of KiB of them) and reads none.
  std::vector<uint8_t> flood;
  for (int i = 0; i < 4000; ++i) {
    const std::vector<uint8_t> m = service::encode(service::MsgType::kStatusRequest, nullptr, 0);
    flood.insert(flood.end(), m.begin(), m.end());
  }
  std::vector<Channel> hogs;
  for (int h = 0; h < 4; ++h) {
    Channel ch = Channel::connect(d.socket(), &st, &why);
    ASSERT_TRUE(ch.valid()) << why;
    service::Hello hello{};
    hello.role = static_cast<uint32_t>(Role::kCtl);
    hello.pid = static_cast<int32_t>(::getpid());
    std::strncpy(hello.version, WEFT_VERSION_STRING, sizeof hello.version - 1);
    ch.send(service::MsgType::kHello, &hello, sizeof hello, net::deadlineIn(5));
    ch.send(service::MsgType::kStatusRequest, nullptr, 0, net::deadlineIn(5));
    ASSERT_EQ(::send(ch.fd(), flood.data(), flood.size(), MSG_NOSIGNAL | MSG_DONTWAIT),
              static_cast<ssize_t>(flood.size()));
    hogs.push_back(std::move(ch));
  }
  // Meanwhile another client's round trips (status, and an attach and detach of a communicator
  // whose engine weftd runs) each take a moment, not a reply timeout (0.5 s).
  service::Attach a = attachOf(0xfa1e, 1, 16 << 20, 2, 1 << 20);
  double worst = 0;
  const auto timed = [&](auto&& call) {
    const auto start = std::chrono::steady_clock::now();
    call();
    worst = std::max(worst, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
  bool attachedOnce = false;
  while (std::chrono::steady_clock::now() < until) {
    timed([&] { EXPECT_EQ(good->status().head.pid, d.pid()); });
    if (!attachedOnce && worst > 0) {
      attachedOnce = true;
      Client::Attachment got;
      timed([&] { got = good->attach(a); });
      EXPECT_TRUE(got.engineInWeftd);
    }
  }
  timed([&] { good->detach(); });
  EXPECT_LT(worst, 0.25) << "a round trip of the reading client waited on the others";
  // Every hog is dropped within the reply bound: what was queued for it, then the end.
  for (Channel& ch : hogs) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool closed = false;
    std::vector<uint8_t> sink(1 << 16);
    while (!closed && std::chrono::steady_clock::now() < deadline) {
      pollfd p{ch.fd(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(ch.fd(), sink.data(), sink.size(), MSG_DONTWAIT);
      closed = n == 0 || (n < 0 && errno == ECONNRESET);
    }
    EXPECT_TRUE(closed) << "weftd kept a connection that reads nothing";
  }
  EXPECT_TRUE(answers(d));
}

constexpr uid_t kNobody = 65534;

// A rank that disagrees with its communicator's first rank, or names more ranks than one reply's
// descriptors can carry, is refused; the communicator's memory stays whole for the ranks that agree.
TEST(Weftd, ADisagreeingAttachIsRefusedAndTheCommunicatorStaysWhole) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  // No staging: the engines stay in the ranks (this test has none).
  service::Attach a = attachOf(0x5eed, 2, 64 << 20, 1, 0);
  ConnectStatus st;
  std::string why;
  auto first = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
  ASSERT_TRUE(first) << why;
  const Client::Attachment rank0 = first->attach(a);
  ASSERT_EQ(rank0.heapFds.size(), 2u);
  const auto refusedFor = [&](service::Attach bad) {
    auto c = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
    if (!c) return std::string("no connection: ") + why;
    try {
      (void)c->attach(bad);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  service::Attach other = a;
  other.rank = 1;
  other.nranks = 3;
  EXPECT_NE(refusedFor(other).find("disagrees with its communicator's first rank"), std::string::npos);
  other.nranks = 63;
  other.rank = 62;
  EXPECT_NE(refusedFor(other).find("at most 62 ranks per node"), std::string::npos);
  // Rank 1 as agreed still gets every heap, rank 0's the same memory rank 0 has.
  auto second = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
  ASSERT_TRUE(second) << why;
  service::Attach rank1 = a;
  rank1.rank = 1;
  const Client::Attachment got = second->attach(rank1);
  ASSERT_EQ(got.heapFds.size(), 2u);
  const auto heap0 = [&](const Client::Attachment& at) {
    return transport::ShmSegment::map(at.heapFds[0], a.heapBytes, "rank 0's heap");
  };
  const transport::ShmSegment seen0 = heap0(rank0), seen1 = heap0(got);
  static_cast<volatile uint8_t*>(seen0.data())[4096] = 0x5a;
  EXPECT_EQ(static_cast<volatile uint8_t*>(seen1.data())[4096], 0x5a);
  first->detach();
  second->detach();
  EXPECT_TRUE(answers(d));
}

// A map-memory request that weftd cannot serve is refused, naming why: from a connection with
// nothing attached (a protocol error: that connection is dropped), and from a rank whose engine
// reads inputs through staging (the CPU backend's), whose connection goes on: it detaches as usual.
TEST(Weftd, AMapRequestItCannotServeIsRefusedAndTheRankStays) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  ConnectStatus st;
  std::string why;
  auto lone = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
  ASSERT_TRUE(lone) << why;
  const unsigned char handle[64] = {1, 2, 3};
  EXPECT_THROW(
      {
        try {
          (void)lone->mapMemory(handle, 1 << 20, 4096);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("nothing attached"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  auto lib = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
  ASSERT_TRUE(lib) << why;
  const Client::Attachment got = lib->attach(attachOf(0x3a9, 1, 32 << 20, 1, 1 << 20));
  ASSERT_EQ(got.engineInWeftd, 1u);
  try {
    (void)lib->mapMemory(handle, 1 << 20, 4096);
    ADD_FAILURE() << "mapped";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidUsage);
    EXPECT_NE(std::string(e.what()).find("reads inputs through staging"), std::string::npos) << e.what();
  }
  EXPECT_EQ(lib->status().head.comms, 1u);  // still served
  lib->detach();
  EXPECT_TRUE(answers(d));
}

// A wake (no reply) from a connection with nothing attached is a protocol error: weftd refuses it,
// naming why, and drops that connection; from an attached rank it starts the engine if it left
// (the CPU backend's threads never do), and the rank goes on.
TEST(Weftd, AWakeNeedsAnAttachedRank) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  ConnectStatus st;
  std::string why;
  auto lone = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
  ASSERT_TRUE(lone) << why;
  lone->wake();
  // Refused and dropped: the next request reads the refusal, or finds the socket closed.
  EXPECT_THROW((void)lone->status(), Error);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (d.output().find("wake: nothing attached") == std::string::npos && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_NE(d.output().find("wake: nothing attached"), std::string::npos) << d.output();
  auto lib = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
  ASSERT_TRUE(lib) << why;
  ASSERT_EQ(lib->attach(attachOf(0x3aa, 1, 32 << 20, 1, 1 << 20)).engineInWeftd, 1u);
  for (int i = 0; i < 3; ++i) lib->wake();
  EXPECT_EQ(lib->status().head.comms, 1u);
  lib->detach();
  EXPECT_TRUE(answers(d));
}

// One user may hold at most service_user_clients connections and service_user_bytes of weftd's
// memory: past either, weftd refuses, naming the setting, and goes on serving (a closed
// connection makes room again).
TEST(Weftd, OneUserCannotTakeEveryConnectionOrAllTheMemory) {
  setenv("WEFT_SERVICE_USER_CLIENTS", "3", 1);
  setenv("WEFT_SERVICE_USER_BYTES", "96M", 1);
  WeftdProcess d;
  unsetenv("WEFT_SERVICE_USER_CLIENTS");
  unsetenv("WEFT_SERVICE_USER_BYTES");
  ASSERT_TRUE(d.started()) << d.output();
  ConnectStatus st;
  std::string why;
  const auto refusal = [&](const std::function<void()>& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // Two heaps of 64 MiB would pass 96 MiB; two of 32 MiB do not.
  auto tooBig = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
  ASSERT_TRUE(tooBig) << why;
  EXPECT_NE(refusal([&] { (void)tooBig->attach(attachOf(0x51, 2, 64 << 20, 1, 0)); }).find("service_user_bytes"),
            std::string::npos);
  tooBig.reset();
  auto lib = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
  ASSERT_TRUE(lib) << why;
  EXPECT_EQ(lib->attach(attachOf(0x52, 2, 32 << 20, 1, 0)).heapFds.size(), 2u);
  // The attached rank and two more connections are three: a fourth is refused.
  auto second = connectTo(d, &st, &why);
  ASSERT_TRUE(second) << why;
  auto third = connectTo(d, &st, &why);
  ASSERT_TRUE(third) << why;
  std::unique_ptr<Client> fourth;
  EXPECT_NE(refusal([&] { fourth = connectTo(d, &st, &why); }).find("service_user_clients"), std::string::npos);
  // One closed, a new one is served (once weftd has seen the close).
  third.reset();
  bool served = false;
  for (int i = 0; i < 200 && !served; ++i) {
    try {
      served = answers(d);
    } catch (const Error&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  EXPECT_TRUE(served);
  lib->detach();
}

// Runs `body` as user `uid` (group `gid`) in a child; returns its exit status.
template <class Body>
int asUser(uid_t uid, gid_t gid, Body&& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0) _exit(90);
    _exit(body());
  }
  int status = 0;
  bool reaped = false;
  for (int i = 0; i < 3000 && !(reaped = ::waitpid(pid, &status, WNOHANG) == pid); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!reaped) {
    // A child that hangs fails the check (-1), and is not left running as the other user.
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Whoever listens on the socket would make a job's memory, and /dev/shm (the default directory's
// parent) is writable by every user: a client attaches only to a listener of its own user, root,
// or service_trust_uids, whoever made the directory.
TEST(Weftd, AClientRefusesAListenerOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to listen as another user (nobody)";
  char dirTemplate[] = "/tmp/weftd-squat-XXXXXX";
  ASSERT_NE(::mkdtemp(dirTemplate), nullptr);
  const std::string dir = dirTemplate;
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t squatter = ::fork();
  if (squatter == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kNobody, kNobody, kNobody) != 0 ||
        ::setresuid(kNobody, kNobody, kNobody) != 0)
      _exit(90);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s/weftd.sock", dir.c_str());
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 4) != 0) _exit(91);
    (void)!::write(ready[1], "x", 1);
    for (int i = 0; i < 100; ++i) {  // at most 10 s: accepts and holds connections, says nothing
      (void)::accept4(fd, nullptr, nullptr, SOCK_NONBLOCK);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ConnectStatus st;
  std::string why;
  std::string refusal;
  try {
    (void)Client::connect(dir, Role::kLibrary, 2, {}, &st, &why);
  } catch (const Error& e) {
    refusal = e.what();
  }
  EXPECT_NE(refusal.find("runs as uid 65534, neither this user"), std::string::npos) << refusal;
  // Trusted by name, the same listener is talked to (and, saying nothing, times out).
  std::string trusted;
  try {
    (void)Client::connect(dir, Role::kLibrary, 0.5, {kNobody}, &st, &why);
  } catch (const Error& e) {
    trusted = e.what();
  }
  EXPECT_EQ(trusted.find("neither this user"), std::string::npos) << trusted;
  ::kill(squatter, SIGKILL);
  ::waitpid(squatter, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  ::unlink((dir + "/weftd.sock").c_str());
  ::rmdir(dir.c_str());
}

TEST(Weftd, AnotherUsersClientIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user (nobody)";
  {
    // The default: weftd's directory is 0700, so another user cannot even reach the socket.
    WeftdProcess d;
    ASSERT_TRUE(d.started()) << d.output();
    const int rc = asUser(kNobody, kNobody, [&] {
      ConnectStatus st;
      std::string why;
      auto c = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
      return c ? 1 : st == ConnectStatus::kDenied ? 0 : 2;
    });
    EXPECT_EQ(rc, 0);
    EXPECT_TRUE(answers(d));
  }
  // Other users allowed by the configuration: the socket is reachable and SO_PEERCRED decides.
  setenv("WEFT_SERVICE_ALLOW_UIDS", "12345", 1);
  WeftdProcess d;
  unsetenv("WEFT_SERVICE_ALLOW_UIDS");
  ASSERT_TRUE(d.started()) << d.output();
  const std::string parent = d.dir().substr(0, d.dir().rfind('/'));
  ASSERT_EQ(::chmod(parent.c_str(), 0711), 0);
  struct stat dirStat {};
  ASSERT_EQ(::stat(d.dir().c_str(), &dirStat), 0);
  EXPECT_EQ(dirStat.st_mode & 0777, 0711u);
  const auto tryAs = [&](uid_t uid) {
    return asUser(uid, uid, [&] {
      ConnectStatus st;
      std::string why;
      try {
        auto c = Client::connect(d.dir(), Role::kLibrary, 5, {}, &st, &why);
        if (!c) return 3;
        const Client::Status seen = c->status();
        // Another user sees only its own connections, not weftd's user's (the parent's, held open).
        for (const service::StatusRow& r : seen.rows)
          if (r.uid != uid) return 5;
        return seen.head.pid == d.pid() ? 0 : 3;
      } catch (const Error& e) {
        return std::string(e.what()).find("uid " + std::to_string(uid) + " is not one of them") != std::string::npos
                   ? 10
                   : 4;
      }
    });
  };
  ConnectStatus keptSt;
  std::string keptWhy;
  const auto kept = connectTo(d, &keptSt, &keptWhy);  // weftd's own user, connected meanwhile
  ASSERT_TRUE(kept) << keptWhy;
  EXPECT_EQ(tryAs(kNobody), 10);
  EXPECT_EQ(tryAs(12345), 0);
  // Through the C API: service=on fails init naming the refusal; auto runs embedded.
  const auto initAs = [&](const char* mode) {
    return asUser(kNobody, kNobody, [&] {
      setenv("WEFT_SERVICE_DIR", d.dir().c_str(), 1);
      setenv("WEFT_SERVICE", mode, 1);
      weft_unique_id_t id;
      if (weft_get_unique_id(&id) != WEFT_SUCCESS) return 5;
      weft_comm_t comm = nullptr;
      const weft_result_t r = weft_comm_init_rank(&comm, 1, id, 0, nullptr);
      if (r == WEFT_SUCCESS) return weft_comm_destroy(comm) == WEFT_SUCCESS ? 0 : 6;
      const bool named = std::string(weft_get_last_error(nullptr)).find("is not one of them") != std::string::npos;
      return r == WEFT_ERR_INVALID_USAGE && named ? 10 : 7;
    });
  };
  EXPECT_EQ(initAs("on"), 10);
  EXPECT_EQ(initAs("auto"), 0);
  // An allowed user gets its memory from weftd but runs its engine itself (weftd follows no
  // pointer of another user's).
  const int allowed = asUser(12345, 12345, [&] {
    setenv("WEFT_SERVICE_DIR", d.dir().c_str(), 1);
    setenv("WEFT_SERVICE", "on", 1);
    weft_unique_id_t id;
    weft_comm_t comm = nullptr;
    if (weft_get_unique_id(&id) != WEFT_SUCCESS || weft_comm_init_rank(&comm, 1, id, 0, nullptr) != WEFT_SUCCESS)
      return 5;
    void* y = nullptr;
    std::vector<float> x(1000, 2.0f);
    const bool ok = weft_mem_alloc(comm, 4096, &y) == WEFT_SUCCESS &&
                    weft_allreduce(comm, x.data(), y, 1000, WEFT_FLOAT32, nullptr) == WEFT_SUCCESS &&
                    static_cast<float*>(y)[999] == 2.0f;
    return weft_comm_destroy(comm) == WEFT_SUCCESS && ok ? 0 : 6;
  });
  EXPECT_EQ(allowed, 0);
  EXPECT_NE(d.output().find("uid 12345, pid"), std::string::npos) << d.output();
  EXPECT_NE(d.output().find("engine in the rank"), std::string::npos) << d.output();
  EXPECT_NE(d.output().find("refused pid"), std::string::npos) << d.output();
  EXPECT_TRUE(answers(d));
}

}  // namespace
}  // namespace weft::test
