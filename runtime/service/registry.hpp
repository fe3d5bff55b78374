// weftd's communicators: for each (user, communicator id), every rank's heap segment and work
// queue, made by weftd at the first rank's attach and handed to each rank by descriptor, and, for
// weftd's own user, the engine that runs the rank's ops over them (with a staging segment for
// inputs outside the heap). weftd keeps the memory mapped so that it can fail a communicator whose
// rank died (it writes the failure where the other ranks' engines and host waits look) and lets it
// go once no rank is attached. Not thread-safe: the daemon's one loop owns it (the engines' worker
// threads touch only the shared memory). Nothing here waits on a worker: a stopped engine is
// joined by the reaper (reaper.hpp), which keeps the memory it runs over until then.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "reaper.hpp"
#include "runtime/backend.hpp"
#include "runtime/work_queue.hpp"
#include "transport/p2p/shm_segment.hpp"
#include "wire.hpp"

namespace weft::service {

class CommRegistry {
 public:
  CommRegistry() = default;
  CommRegistry(const CommRegistry&) = delete;
  CommRegistry& operator=(const CommRegistry&) = delete;
  ~CommRegistry();

  // Attaches rank a.rank of communicator a.commId of user `uid` (process `pid`) and, where weftd
  // runs the engine (its own user, a.engineInWeftd), starts it. Fills *out and returns the
  // descriptors to send, in Attached's order; they stay the registry's. Throws weft::Error
  // (kInvalidUsage) where the rank is attached already, the sizes disagree with the first rank's
  // or the heap cannot hold the layout's control area.
  std::vector<int> attach(uint32_t uid, pid_t pid, const Attach& a, Attached* out);
  // The rank's communicator ended cleanly on it. Its engine (if weftd's) is told to stop at once
  // and joined off the caller's thread; `ticket` (non-zero) is among takeDone()'s once its
  // workers have exited, which is when the rank may be told (it then completes what they left).
  void detach(uint32_t uid, uint64_t commId, int rank, uint64_t ticket);
  // The rank's process went without detaching: every other rank's ops fail (named error).
  void lost(uint32_t uid, uint64_t commId, int rank);
  // Where weftd's GPU engine of the rank maps an allocation of the rank's device memory (mapping
  // it now); 0 where it can only once reclaim has closed a retired mapping at that address and
  // `mayDefer` (ServedEngine::mapInput): ask again when retiring() is false. Throws weft::Error
  // (kInvalidUsage) where weftd runs no GPU engine for the rank.
  uint64_t mapMemory(uint32_t uid, uint64_t commId, int rank, const MapMemory& m, bool mayDefer);
  // Whether the rank's engine holds retired mappings not yet closed (false where it has none).
  bool retiring(uint32_t uid, uint64_t commId, int rank) const;
  // The rank found weftd's engine of it gone idle with an op to run: starts it again. Throws
  // weft::Error: kInvalidUsage where weftd runs no engine for the rank; a launch that fails is the
  // engine's fault (checkEngines fails the communicator).
  void wake(uint32_t uid, uint64_t commId, int rank);
  // Closes the mappings of inputs the ranks have freed once no engine of weftd's runs a kernel on
  // their GPU, and frees what stopped engines ran over once none runs on any: a GPU lets memory go
  // (cudaFree, cudaIpcCloseMemHandle) only after every kernel of the process's context on it has
  // ended, and weftd's would never end. Engines leave when idle (service_engine_idle_us), so this
  // happens whenever the jobs pause. The daemon's loop calls it every turn.
  void reclaim();

  // Fails every communicator one of whose engines in weftd has failed on its own (a GPU kernel's
  // fault), once: every rank's ops end with an error naming it, none waits on it. The daemon's
  // loop calls it every turn.
  void checkEngines();

  // Readable while detach tickets are done and not taken.
  int doneFd() const { return reaper_.fd(); }
  std::vector<uint64_t> takeDone() { return reaper_.takeDone(); }
  // Engines told to stop and not yet joined.
  size_t stopping() const { return reaper_.pending(); }

  uint32_t comms() const { return static_cast<uint32_t>(comms_.size()); }
  uint64_t heldBytes() const;
  // What one user's communicators hold (their heaps, staging segments and queues).
  uint64_t heldBytes(uint32_t uid) const;
  // The most one user's heaps and staging segments may take (0: no limit): an attach that would
  // make more throws weft::Error (kOutOfMemory) naming service_user_bytes, and makes nothing.
  void limitUserBytes(uint64_t bytes) { userBytes_ = bytes; }
  // The most workers of an engine weftd runs (service_engine_ctas); a rank's persistent_ctas asks
  // for the rest. Fewer workers than an op has items is safe: they take the items in order.
  void limitEngineWorkers(int workers) { engineWorkers_ = workers; }
  // How long weftd's engine waits on an empty queue before its workers leave (0: never).
  void setEngineIdleNs(uint64_t ns) { engineIdleNs_ = ns; }

 private:
  enum class RankState { kNever, kAttached, kGone };
  struct Rank {
    RankState state = RankState::kNever;
    pid_t pid = 0;
    int heapFd = -1, queueFd = -1, stagingFd = -1;
    std::shared_ptr<ServedHeap> heap;  // shared with the reaper's jobs (any rank's workers store here)
    transport::ShmSegment staging;
    std::unique_ptr<WorkQueue> queue;
    std::unique_ptr<ServedEngine> engine;
  };
  struct Comm {
    Attach first{};  // the first rank's attach: every rank must agree with it
    bool engineInWeftd = false;
    // Every rank's heap in weftd's address space, then null (no proxy); the engines' views point
    // into it, so a stopping engine's job keeps it.
    std::shared_ptr<std::vector<uint8_t*>> bases;
    std::vector<Rank> ranks;
    int lostRank = -1;          // the first rank that died (the communicator has failed)
    bool engineFailed = false;  // an engine of weftd's failed on its own (checkEngines)
    pid_t lostPid = 0;
  };
  using Key = std::pair<uint32_t, uint64_t>;

  // Bytes of the heaps, staging segments and queues a communicator holds.
  static uint64_t bytesOf(const Comm& c);
  // Writes the failure (rank `c.lostRank` gone) into rank r's queue and engine control words.
  static void failRank(Comm& c, int r);
  void startEngine(Comm& c, int r);
  // The engine weftd runs for an attached rank, or null.
  ServedEngine* engineOf(uint32_t uid, uint64_t commId, int rank) const;
  // Stops the rank's engine (raising `word`; the reaper joins it, then frees what it ran over) and
  // lets its queue and staging go, with the heap's descriptor unless `heapFd` is false (a failed
  // attach undoes only what it made); the heap's mapping goes with the communicator and the last
  // of its engines. `ticket`, if non-zero, is reported done once the workers have exited.
  void release(Comm& c, Rank& r, ControlWord word, uint64_t ticket = 0, bool heapFd = true);
  // Workers of the engines weftd runs for `c`: the ranks' persistent_ctas, at most engineWorkers_.
  int workersFor(const Comm& c) const;
  // Lets the communicator go once no rank is attached.
  void dropIfIdle(const Key& k);

  // Destroyed last (after the reaper has joined every engine): what joined engines ran over.
  std::vector<std::shared_ptr<void>> graveyard_;
  Reaper reaper_;  // outlives comms_: its jobs hold what their workers touch
  std::map<Key, Comm> comms_;
  uint64_t userBytes_ = 0;
  int engineWorkers_ = 32;
  uint64_t engineIdleNs_ = 0;
};

}  // namespace weft::service
