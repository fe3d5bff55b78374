#include "registry.hpp"

#include <unistd.h>

#include "common/error.hpp"
#include "common/log.hpp"
#include "device/comm_device.hpp"

namespace weft::service {

CommRegistry::~CommRegistry() {
  for (auto& [key, c] : comms_)
    for (Rank& r : c.ranks) release(r);
}

void CommRegistry::release(Rank& r) {
  for (int* fd : {&r.heapFd, &r.queueFd})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
  r.heap.reset();
  r.queue.reset();
}

std::vector<int> CommRegistry::attach(uint32_t uid, pid_t pid, const Attach& a) {
  const Key key{uid, a.commId};
  auto [it, fresh] = comms_.try_emplace(key);
  Comm& c = it->second;
  try {
    if (fresh) {
      c.heapBytes = a.heapBytes;
      c.queueBytes = a.queueBytes;
      c.ranks.resize(static_cast<size_t>(a.nranks));
      // Every rank's heap at once: a rank maps its peers' as soon as it attaches. The segments
      // are sparse until written.
      for (int r = 0; r < a.nranks; ++r)
        c.ranks[r].heap =
            transport::ShmSegment::createAnonymous("heap" + std::to_string(r), a.heapBytes, &c.ranks[r].heapFd);
    }
    if (static_cast<int32_t>(c.ranks.size()) != a.nranks || c.heapBytes != a.heapBytes || c.queueBytes != a.queueBytes)
      throw Error(Code::kInvalidUsage, "attach: rank " + std::to_string(a.rank) +
                                           " disagrees with its communicator's first rank on nranks, heap or queue "
                                           "size");
    Rank& me = c.ranks[a.rank];
    if (me.state != RankState::kNever)
      throw Error(Code::kInvalidUsage, "attach: rank " + std::to_string(a.rank) + " of communicator " +
                                           std::to_string(a.commId) + " has attached before");
    me.queue = transport::ShmSegment::createAnonymous("queue" + std::to_string(a.rank), a.queueBytes, &me.queueFd);
    me.state = RankState::kAttached;
    me.pid = pid;
    if (c.lostRank >= 0) failRank(c, a.rank);
  } catch (...) {
    if (fresh) {
      for (Rank& r : c.ranks) release(r);
      comms_.erase(it);
    }
    throw;
  }
  std::vector<int> fds{c.ranks[a.rank].heapFd, c.ranks[a.rank].queueFd};
  for (int r = 0; r < a.nranks; ++r)
    if (r != a.rank) fds.push_back(c.ranks[r].heapFd);
  WEFT_LOG(kInfo, kService, "rank {}/{} of communicator {:016x} (uid {}, pid {}) attached", a.rank, a.nranks, a.commId,
           uid, pid);
  return fds;
}

void CommRegistry::detach(uint32_t uid, uint64_t commId, int rank) {
  const Key key{uid, commId};
  auto it = comms_.find(key);
  if (it == comms_.end()) return;
  Rank& r = it->second.ranks[rank];
  r.state = RankState::kGone;
  release(r);
  WEFT_LOG(kInfo, kService, "rank {} of communicator {:016x} detached", rank, commId);
  dropIfIdle(key);
}

void CommRegistry::lost(uint32_t uid, uint64_t commId, int rank) {
  const Key key{uid, commId};
  auto it = comms_.find(key);
  if (it == comms_.end()) return;
  Comm& c = it->second;
  if (c.lostRank < 0) {
    c.lostRank = rank;
    c.lostPid = c.ranks[rank].pid;
    WEFT_LOG(kWarn, kService, "rank {} (pid {}) of communicator {:016x} went without detaching: failing its peers",
             rank, c.lostPid, commId);
    for (int r = 0; r < static_cast<int>(c.ranks.size()); ++r)
      if (r != rank && c.ranks[r].state == RankState::kAttached) failRank(c, r);
  }
  c.ranks[rank].state = RankState::kGone;
  release(c.ranks[rank]);
  dropIfIdle(key);
}

void CommRegistry::failRank(Comm& c, int r) {
  // The same record a failing wait writes, where that rank's engine and host waits look first.
  dev::CommView v;
  v.rank = r;
  v.nranks = static_cast<int>(c.ranks.size());
  v.queue = static_cast<dev::QueueHeader*>(c.ranks[r].queue.data());
  v.control = static_cast<dev::EngineControl*>(c.ranks[r].heap.data());
  dev::recordFailure(v, dev::WaitSite{0, 0, c.lostRank, dev::WaitWhat::kPeerGone}, dev::Status::kTransport, 0,
                     static_cast<uint64_t>(c.lostPid));
}

void CommRegistry::dropIfIdle(const Key& k) {
  auto it = comms_.find(k);
  for (const Rank& r : it->second.ranks)
    if (r.state == RankState::kAttached) return;
  for (Rank& r : it->second.ranks) release(r);
  WEFT_LOG(kInfo, kService, "communicator {:016x}: no rank attached, its memory released", k.second);
  comms_.erase(it);
}

uint64_t CommRegistry::heldBytes() const {
  uint64_t total = 0;
  for (const auto& [k, c] : comms_)
    for (const Rank& r : c.ranks) total += r.heap.size() + r.queue.size();
  return total;
}

}  // namespace weft::service
