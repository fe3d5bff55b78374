#include "client.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "paths.hpp"
#include "runtime/work_queue.hpp"
#include "weft/version.h"

namespace weft::service {

std::unique_ptr<Client> Client::connect(const std::string& dir, Role role, double timeoutS,
                                        const std::vector<uint32_t>& trustedUids, ConnectStatus* st, std::string* why) {
  Channel ch = Channel::connect(socketPath(dir), st, why);
  if (*st == ConnectStatus::kAbsent) *why = "no weftd serves " + dir + " (no socket there)";
  if (*st == ConnectStatus::kStale) *why = "the weftd of " + dir + " has died (its socket is left)";
  if (!ch.valid()) return nullptr;
  // The directory may be anyone's (/dev/shm is writable by all): the listener's credentials, which
  // the kernel vouches for, decide whether it may make this job's memory.
  const uint32_t listener = ch.peer().uid, me = static_cast<uint32_t>(getuid());
  if (listener != me && listener != 0 &&
      std::find(trustedUids.begin(), trustedUids.end(), listener) == trustedUids.end())
    throw Error(Code::kInvalidUsage, "the weftd of " + dir + " runs as uid " + std::to_string(listener) +
                                         ", neither this user (" + std::to_string(me) +
                                         ") nor root nor in service_trust_uids: not attaching to it");
  std::unique_ptr<Client> c(new Client(std::move(ch), timeoutS));
  Hello h{};
  h.role = static_cast<uint32_t>(role);
  h.pid = static_cast<int32_t>(getpid());
  putText(h.version, WEFT_VERSION_STRING);
  try {
    c->ch_.send(MsgType::kHello, &h, sizeof h, net::deadlineIn(timeoutS));
  } catch (const Error&) {
    // A weftd that refuses at accept (credentials) may have closed already; its reason is waiting.
  }
  const Frame f = c->expect(MsgType::kWelcome);
  std::string bad;
  if (!decodeWelcome(f, &c->welcome_, &bad)) throw Error(Code::kTransport, "weftd's welcome: " + bad);
  return c;
}

Frame Client::expect(MsgType type) {
  Frame f = ch_.receive(net::deadlineIn(timeoutS_));
  if (f.type == MsgType::kRefused) {
    Refused r{};
    std::string bad;
    if (!decodeRefused(f, &r, &bad)) throw Error(Code::kTransport, "weftd's refusal: " + bad);
    const bool known = r.code > static_cast<int32_t>(Code::kSuccess) && r.code <= static_cast<int32_t>(Code::kInternal);
    throw Error(known ? static_cast<Code>(r.code) : Code::kInternal, std::string("weftd refused: ") + r.message);
  }
  if (f.type != type)
    throw Error(Code::kTransport, "weftd answered with message type " + std::to_string(static_cast<int>(f.type)) +
                                      ", expected " + std::to_string(static_cast<int>(type)));
  return f;
}

uint64_t Client::mapMemory(const unsigned char (&handle)[64], uint64_t base, uint64_t bytes) {
  MapMemory m{};
  std::memcpy(m.handle, handle, sizeof m.handle);
  m.base = base;
  m.bytes = bytes;
  std::lock_guard<std::mutex> lock(requestMutex_);
  ch_.send(MsgType::kMapMemory, &m, sizeof m, net::deadlineIn(timeoutS_));
  const Frame f = expect(MsgType::kMemoryMapped);
  MemoryMapped got{};
  std::string bad;
  if (!decodeMemoryMapped(f, &got, &bad)) throw Error(Code::kTransport, "weftd's map reply: " + bad);
  return got.address;
}

void Client::wake() {
  std::lock_guard<std::mutex> lock(requestMutex_);
  ch_.send(MsgType::kWake, nullptr, 0, net::deadlineIn(timeoutS_));
}

Client::Status Client::status() {
  ch_.send(MsgType::kStatusRequest, nullptr, 0, net::deadlineIn(timeoutS_));
  const Frame f = expect(MsgType::kStatusReply);
  Status s;
  std::string bad;
  if (!decodeStatus(f, &s.head, &s.rows, &bad)) throw Error(Code::kTransport, "weftd's status: " + bad);
  return s;
}

Client::Attachment Client::attach(const Attach& a) {
  ch_.send(MsgType::kAttach, &a, sizeof a, net::deadlineIn(timeoutS_));
  Attachment out;
  out.reply = expect(MsgType::kAttached);
  const Frame& f = out.reply;
  Attached got{};
  std::string bad;
  if (!decodeAttached(f, &got, &bad)) throw Error(Code::kTransport, "weftd's attach reply: " + bad);
  if (got.commId != a.commId || got.rank != a.rank || got.nranks != a.nranks)
    throw Error(Code::kTransport, "weftd attached another communicator rank than asked for");
  // Descriptors: this rank's heap, its queue, its staging (engine in weftd), then the other ranks'
  // heaps in rank order.
  out.heapFds.assign(static_cast<size_t>(a.nranks), -1);
  out.heapFds[a.rank] = f.fds[0];
  out.queue = transport::ShmSegment::map(f.fds[1], WorkQueue::bytesFor(a.queueDepth), "weftd's work queue");
  int i = 2;
  out.engineInWeftd = got.engineInWeftd;
  out.engineWorkers = got.engineWorkers;
  out.weftdHeapBase = got.heapBase;
  if (got.engineInWeftd == 1) {
    out.staging = transport::ShmSegment::map(f.fds[i++], a.stagingBytes, "weftd's staging segment");
    out.weftdStagingBase = got.stagingBase;
  }
  for (int r = 0; r < a.nranks; ++r)
    if (r != a.rank) out.heapFds[r] = f.fds[i++];
  return out;
}

void Client::watch(std::function<void()> onGone) {
  watching_ = true;
  const int fd = ch_.fd();
  watcher_ = std::thread([this, fd, onGone = std::move(onGone)] {
    while (watching_.load(std::memory_order_acquire)) {
      // The connection's end only: replies to the rank's own requests (mapMemory) are data.
      pollfd p{fd, POLLRDHUP, 0};
      if (::poll(&p, 1, 100) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        onGone();
        return;
      }
    }
  });
}

void Client::stopWatching() {
  watching_.store(false, std::memory_order_release);
  if (watcher_.joinable()) watcher_.join();
}

Client::~Client() { stopWatching(); }

void Client::detach() noexcept {
  stopWatching();  // weftd's answer below is no sign of its end
  try {
    ch_.send(MsgType::kDetach, nullptr, 0, net::deadlineIn(timeoutS_));
    expect(MsgType::kDetached);
  } catch (...) {
  }
  ch_.close();
}

}  // namespace weft::service
