#include "bootstrap.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "bootstrap_wire.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace weft {

namespace {

// A connection whose hello has not fully arrived. Each has until `until` to finish it; at most
// kMaxJoining wait at once (beyond, the oldest is dropped), which bounds rank 0's descriptors.
struct Joining {
  net::Socket s;
  net::Deadline until;
  Hello hello;
  size_t got;
};
constexpr double kHelloS = 10;
constexpr size_t kMaxJoining = 512;

std::string rankName(int r) { return "rank " + std::to_string(r); }

// Adopts every connection waiting at the listener; returns how many.
int acceptJoining(net::Socket& listener, std::vector<Joining>& joining, net::Deadline deadline) {
  for (int n = 0;; ++n) {
    net::Socket s = listener.acceptNow();
    if (!s.valid()) return n;
    if (joining.size() >= kMaxJoining) {
      WEFT_LOG(kWarn, kBootstrap, "{} connections have sent no hello yet; dropped the oldest", joining.size());
      joining.erase(joining.begin());
    }
    joining.push_back(Joining{std::move(s), std::min(deadline, net::deadlineIn(kHelloS)), Hello{}, 0});
  }
}

}  // namespace

std::unique_ptr<Bootstrap> Bootstrap::join(const UniqueId& id, int rank, int nranks, double timeoutS) {
  std::unique_ptr<Bootstrap> b(new Bootstrap(rank, nranks, timeoutS));
  if (rank == 0)
    b->joinAsRoot(id);
  else
    b->joinAsPeer(id);
  WEFT_LOG(kInfo, kBootstrap, "rank {} of {} joined via {}", rank, nranks, id.root.str());
  return b;
}

void Bootstrap::failJob(Code code, const std::string& why, net::Socket* extra) {
  Verdict v{};
  v.code = static_cast<int32_t>(code);
  snprintf(v.message, sizeof v.message, "%s", why.c_str());
  const auto d = net::deadlineIn(1.0);
  auto tell = [&](net::Socket& s) {
    try {
      if (s.valid()) s.sendAll(&v, sizeof v, d);
    } catch (const Error&) {
    }
    s.close();
  };
  for (auto& s : peers_) tell(s);
  if (extra) tell(*extra);
  throw Error(code, why);
}

void Bootstrap::joinAsRoot(const UniqueId& id) {
  net::Socket listener = takeListener(id);
  if (!listener.valid()) listener = net::Socket::listenOn(id.root);
  peers_.resize(nranks_);
  const auto deadline = net::deadlineIn(timeoutS_);
  const std::string build = helloBuild();
  // Every connection's hello is read at once, each against its own deadline, so that connections
  // that never speak (port scanners, a stale job's ranks) delay no real rank.
  std::vector<Joining> joining;
  for (int joined = 1; joined < nranks_;) {
    const auto now = net::Clock::now();
    if (now > deadline)
      failJob(Code::kTimeout,
              "bootstrap: timed out waiting for " + std::to_string(nranks_ - joined) + " more rank(s) to join",
              nullptr);
    for (size_t i = 0; i < joining.size();)
      if (now > joining[i].until) {
        WEFT_LOG(kWarn, kBootstrap, "dropped a connection that sent no hello within {} s", kHelloS);
        joining.erase(joining.begin() + i);
      } else {
        ++i;
      }
    auto wake = deadline;
    std::vector<pollfd> fds{{listener.fd(), POLLIN, 0}};
    for (const Joining& j : joining) {
      fds.push_back({j.s.fd(), POLLIN, 0});
      wake = std::min(wake, j.until);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1;
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left, 1000)));
    if (rc < 0 && errno != EINTR) throwSystemError("poll");
    if (rc <= 0) continue;
    // Read hellos before accepting, so that the indices in `fds` still match `joining`.
    for (size_t i = joining.size(); i-- > 0;) {
      if (!fds[i + 1].revents) continue;
      Joining& j = joining[i];
      try {
        j.got += j.s.recvNow(reinterpret_cast<uint8_t*>(&j.hello) + j.got, helloBytes(j.hello, j.got) - j.got,
                             "a joining rank");
      } catch (const Error& e) {
        WEFT_LOG(kWarn, kBootstrap, "dropped a connection that sent no hello: {}", e.what());
        joining.erase(joining.begin() + i);
        continue;
      }
      if (j.got < helloBytes(j.hello, j.got)) continue;
      net::Socket s = std::move(j.s);
      const Hello h = j.hello;
      joining.erase(joining.begin() + i);
      std::string why;
      const HelloCheck check = checkHello(
          h, id.secret, nranks_, build, [&](int r) { return peers_[r].valid(); }, &why);
      if (check == HelloCheck::kDrop) {
        WEFT_LOG(kWarn, kBootstrap, "dropped a connection with a wrong magic or secret");
        continue;
      }
      if (check == HelloCheck::kFailJob) failJob(Code::kInvalidUsage, why, &s);
      peers_[h.rank] = std::move(s);
      ++joined;
    }
    // None taken although one waits: out of descriptors until a connection's hello deadline frees
    // one. Pause rather than spin on the listener.
    if (fds[0].revents && acceptJoining(listener, joining, deadline) == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Verdict ok{};
  const auto d = net::deadlineIn(timeoutS_);
  for (int r = 1; r < nranks_; ++r) peers_[r].sendAll(&ok, sizeof ok, d);
}

void Bootstrap::joinAsPeer(const UniqueId& id) {
  const auto deadline = net::deadlineIn(timeoutS_);
  root_ = net::Socket::connectTo(id.root, deadline);
  Hello h{kHelloMagic, kBootstrapProtocol, {}, nranks_, rank_, {}};
  memcpy(h.secret, id.secret.data(), kSecretBytes);
  snprintf(h.build, sizeof h.build, "%s", helloBuild().c_str());
  root_.sendAll(&h, sizeof h, deadline);
  Verdict v{};
  root_.recvAll(&v, sizeof v, deadline, "rank 0 to admit every rank");
  if (v.code != 0) throw verdictError(v);
}

void Bootstrap::allGather(const void* mine, size_t bytes, void* all) {
  auto* out = static_cast<uint8_t*>(all);
  memcpy(out + rank_ * bytes, mine, bytes);
  if (nranks_ == 1) return;
  const auto deadline = net::deadlineIn(timeoutS_);
  if (rank_ != 0) {
    root_.sendAll(mine, bytes, deadline);
    root_.recvAll(out, bytes * nranks_, deadline, "rank 0");
    return;
  }
  try {
    for (int r = 1; r < nranks_; ++r) peers_[r].recvAll(out + r * bytes, bytes, deadline, rankName(r));
    for (int r = 1; r < nranks_; ++r) peers_[r].sendAll(out, bytes * nranks_, deadline);
  } catch (const Error&) {
    // Close every connection so that the other ranks fail now instead of at their deadline.
    for (auto& s : peers_) s.close();
    throw;
  }
}

void Bootstrap::barrier() {
  std::vector<uint8_t> all(nranks_);
  uint8_t one = 1;
  allGather(&one, 1, all.data());
}

}  // namespace weft
