// weftd's communicators: for each (user, communicator id), every rank's heap segment and work
// queue, made by weftd at the first rank's attach and handed to each rank by descriptor. weftd
// keeps them mapped so that it can fail a communicator whose rank died (it writes the failure
// where the other ranks' engines and host waits look) and let go of the memory once no rank is
// attached. Not thread-safe: the daemon's one loop owns it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "transport/p2p/shm_segment.hpp"
#include "wire.hpp"

namespace weft::service {

class CommRegistry {
 public:
  CommRegistry() = default;
  CommRegistry(const CommRegistry&) = delete;
  CommRegistry& operator=(const CommRegistry&) = delete;
  ~CommRegistry();

  // Attaches rank a.rank of communicator a.commId of user `uid` (process `pid`). Returns the
  // descriptors to send, in Attached's order; they stay the registry's. Throws weft::Error
  // (kInvalidUsage) where the rank is attached already or the sizes disagree with the first rank's.
  std::vector<int> attach(uint32_t uid, pid_t pid, const Attach& a);
  // The rank's communicator ended cleanly on it.
  void detach(uint32_t uid, uint64_t commId, int rank);
  // The rank's process went without detaching: every other rank's ops fail (named error).
  void lost(uint32_t uid, uint64_t commId, int rank);

  uint32_t comms() const { return static_cast<uint32_t>(comms_.size()); }
  uint64_t heldBytes() const;

 private:
  enum class RankState { kNever, kAttached, kGone };
  struct Rank {
    RankState state = RankState::kNever;
    pid_t pid = 0;
    int heapFd = -1, queueFd = -1;
    transport::ShmSegment heap, queue;
  };
  struct Comm {
    uint64_t heapBytes = 0, queueBytes = 0;
    std::vector<Rank> ranks;
    int lostRank = -1;  // the first rank that died (the communicator has failed)
    pid_t lostPid = 0;
  };
  using Key = std::pair<uint32_t, uint64_t>;

  // Writes the failure (rank `c.lostRank` gone) into rank r's queue and engine control words.
  static void failRank(Comm& c, int r);
  // Lets the communicator go once no rank is attached.
  void dropIfIdle(const Key& k);
  static void release(Rank& r);

  std::map<Key, Comm> comms_;
};

}  // namespace weft::service
