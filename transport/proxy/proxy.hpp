// The host proxy of one rank: this rank's mirror of each peer it reaches through the network, the
// trigger ring its workers post to (device/proxy_device.hpp), and one or more lanes: a network
// back-end (UCX or libfabric) with connections of its own, progressed by a thread of its own,
// which also applies what the peers' same lane sends here. The first lane's thread drains the
// ring and numbers every heap message to a peer in the order the device posted it; with one lane
// large tiles go as RMA writes, with several (sockets, where every byte is a copy by a CPU) every
// byte goes in messages spread over the lanes, and the receiver applies signals in that order.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/process.hpp"
#include "device/proxy_device.hpp"
#include "transport/net/backend.hpp"

namespace weft::transport {

struct ProxyOptions {
  std::string backend = "auto";  // proxy_backend: auto, ucx or ofi
  int cpu = -1;                  // proxy_cpu: the PU the thread is bound to; -1: not bound
  uint32_t depth = 4096;         // trigger slots (a power of two)
  uint64_t eagerBytes = 16384;   // proxy_eager_bytes: puts (rows) up to this size go as messages
  uint64_t batchBytes = 16384;   // proxy_batch_bytes: messages with up to this much data share one
  double timeoutS = 30;          // timeout_s: how long a peer may refuse data before it counts as failed
  int lanes = 0;                 // proxy_lanes: 0 = auto (lanesWanted)
};

// The lanes a rank asks for: `setting` where set (1-16); else, where the back-end's writes are CPU
// copies, half the CPUs this process may run on per rank of its host (each lane a thread on both
// ends of a copy), 1 to 4; one lane over an RDMA NIC.
int lanesWanted(int setting, bool copiesWrites, int cpus, int ranksOnHost);

class Proxy {
 public:
  // Collective over `ex`: agrees on the back-end with every rank (kInvalidUsage naming the ranks
  // that differ), maps a mirror of `heap.bytes` per peer with viaProxy[peer], connects, starts the
  // thread. Throws weft::Error saying what was tried.
  Proxy(Exchange& ex, const std::vector<uint8_t>& viaProxy, Region heap, const ProxyOptions& options);
  // Stops the thread (what is in flight gets a bounded moment to finish) and releases everything.
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  uint8_t* mirror(int peer) const { return mirrors_[peer].base; }
  // The view for device code that runs in this process's threads (the CPU backend).
  dev::ProxyView* view() { return &view_; }
  // What device code on a GPU reaches in host memory (the ring, its tail, the peer flags): one
  // page-aligned block for the GPU backend to map into the device.
  Region deviceShared() const { return shared_; }
  // The view for a GPU: `shared` is deviceShared() as the device addresses it; `head` and
  // `tailSeen` are words in device memory, zeroed (only producers use them: the host never reads
  // the head, it finds the committed slots by their commit bits).
  dev::ProxyView deviceView(uint8_t* shared, uint64_t* head, uint64_t* tailSeen) const;
  // Called once, from the proxy thread or a lane's, with the first fault (at once if one came
  // already); calls are serialized.
  void onFault(std::function<void(const PeerFault&)> sink);
  std::optional<PeerFault> fault() const;
  // The back-end, the lanes, and where the thread runs.
  std::string describe() const;
  int lanes() const { return static_cast<int>(lanes_.size()); }
  // The payload of one message: a run of rows or a piece of a tile (the back-end's eager size).
  uint64_t messageBytes() const { return messageBytes_; }
  // What the proxy has sent so far: heap messages (one per wire message, or per part of a batch),
  // the wire messages that carried them, how many of those were batches, and RMA writes.
  struct Traffic {
    uint64_t parts = 0, messages = 0, batches = 0, writes = 0;
  };
  Traffic traffic() const;
  // Every rank has finished every op (finalize's barrier): peers may now close their connections,
  // which is no fault.
  void closing() { closing_ = true; }
  // Stops the threads once they have carried every trigger posted so far (bounded: a dead peer
  // must not hold destroy). !drain: at once. Returns false where a thread stopped taking steps
  // inside the network library (kStuckMs) and was left running: it may still touch this object,
  // the heap and the mirrors, so the owner must then leak them (Comm does). Later calls return the
  // first call's answer.
  bool stop(bool drain);
  // How long a thread may take no step before stop() leaves it.
  static constexpr int kStuckMs = 1500;

 private:
  // A message for a lane other than the first: one wire message, numbered.
  struct Command {
    int peer;
    uint32_t kind;
    uint64_t offset, value;
    uint32_t seq;
    std::vector<MessagePart> parts;  // a batch's (kind kMsgBatch)
  };
  // The messages to one peer taken from the ring in this drain and not yet sent, as one batch.
  struct OpenBatch {
    std::vector<MessagePart> parts;
    uint64_t bytes = 0;   // batchBytes(parts)
    bool listed = false;  // in openPeers_
  };
  struct Lane {
    std::unique_ptr<NetBackend> backend;
    std::thread thread;  // lanes after the first
    std::mutex mutex;
    std::vector<Command> incoming;      // under mutex
    std::atomic<uint64_t> queued{0};    // commands given to it and not yet handed to its back-end
    std::atomic<uint64_t> inFlight{0};  // its back-end's outstanding(), as its thread last saw it
    std::atomic<uint64_t> steps{0};     // its thread's loop turns, for stop() to tell it stuck
    std::atomic<bool> ended{false};     // its thread has returned
    std::atomic<uint32_t> goneSeen{0};  // goneCount_ as its thread last applied it
    uint64_t load() const { return queued.load(std::memory_order_relaxed) + inFlight.load(std::memory_order_relaxed); }
  };
  void start(Exchange& ex, Region heap, const ProxyOptions& options);
  void openLanes(Exchange& ex, const ProxyOptions& options);
  void unmapAll();
  void run();
  void runLane(Lane& lane);
  bool committed() const;
  // The emptiest lane's load, or the fullest's.
  uint64_t lanesLoad(bool most) const;
  void waitForRoom();
  uint32_t drainRing();
  void take(uint64_t w0, uint64_t w1);
  // A heap message to `peer`, cut to the lanes' message size, each piece staged.
  void send(int peer, uint32_t kind, uint64_t offset, uint64_t value);
  // A contiguous run of the mirror: in messages of a run each where it is at most
  // proxy_eager_bytes or there are several lanes, else one RMA write.
  void carry(int peer, uint64_t offset, uint64_t bytes);
  // One wire message's worth to `peer`: joins the peer's open batch where it carries at most
  // proxy_batch_bytes of data and the batch has room, else goes alone (after the batch).
  void stage(int peer, uint32_t kind, uint64_t offset, uint64_t value);
  // Sends `peer`'s open batch (one part: as a message of its own); every peer's, at the end of a
  // drain, so that nothing waits for a later trigger.
  void flush(int peer);
  void flushAll();
  // Numbers a wire message to `peer` and gives it to the least loaded lane.
  void dispatch(int peer, uint32_t kind, uint64_t offset, uint64_t value, std::vector<MessagePart> parts = {});
  static void bump(std::atomic<uint64_t>& count, uint64_t n);
  void noteFault(const PeerFault& f);
  // The watch's look: where the proxy thread has not taken the marks for three looks it is stuck
  // (in a send to the dead peer, as like as not), and the ops hear of the end from here.
  void noteGoneIfStuck();
  std::string goneText(int peer) const;
  // From `lane`'s own thread: tells its back-end of the peers marked gone since it last looked.
  void applyGone(Lane& lane);
  // Joins `lane`'s thread (the first lane's: thread_) once it has returned; leaves it where it
  // takes no step for kStuckMs. Returns whether it was joined.
  bool joinUnlessStuck(std::thread& thread, const Lane& lane);

  int nranks_;
  Region heap_;
  std::vector<uint8_t> viaProxy_;
  std::vector<Region> mirrors_;
  std::unique_ptr<ArrivalOrder> arrivals_;  // shared by the lanes
  std::vector<std::unique_ptr<Lane>> lanes_;
  NetBackend* backend_ = nullptr;  // the first lane's, driven by the proxy thread
  std::vector<uint32_t> sent_;     // heap messages numbered per peer
  std::atomic<uint64_t> partsSent_{0}, messagesSent_{0}, batchesSent_{0}, writesSent_{0};  // traffic()
  std::vector<OpenBatch> open_;  // [nranks], the proxy thread's
  std::vector<int> openPeers_;   // peers whose batch has parts
  uint64_t batchPartMax_ = 0;    // proxy_batch_bytes, within messageBytes_
  bool batching_ = false;        // proxy_batch_bytes is not 0 (signals, of no data, batch then)
  uint64_t messageBytes_ = kMsgPayloadMax;
  uint64_t laneLoadMax_ = 1024;  // messages a lane may hold queued and in flight
  int lanesAsked_ = 1;           // what this rank's proxy_lanes (or auto) asked for
  uint64_t patienceNs_ = 30'000'000'000ull;
  // The ring, its tail and the peer flags in one mapping (deviceShared()); the producers' head and
  // their cached tail here for the CPU backend's view_ (on a GPU in device memory).
  Region shared_;
  dev::Trigger* ring_ = nullptr;
  uint64_t* tail_ = nullptr;
  uint8_t* sharedViaProxy_ = nullptr;
  uint32_t depth_ = 0;
  alignas(64) uint64_t head_ = 0;
  alignas(64) uint64_t tailSeen_ = 0;
  uint64_t taken_ = 0;  // the proxy thread's own count of triggers taken
  dev::ProxyView view_{};
  int cpu_;
  uint64_t eagerBytes_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> drain_{true};
  std::atomic<bool> closing_{false};
  std::atomic<bool> lanesStop_{false};
  std::atomic<int> runningOn_{-1};
  std::optional<bool> stopped_;  // stop()'s answer, once it has run
  // The proxy peers' processes (pid 0 for the others), and the watch of those on this host: a
  // dead one fails at once and is sent nothing more (null where none is watchable).
  std::vector<ProcessIdentity> watched_;
  std::unique_ptr<ProcessWatch> watch_;
  int unappliedLooks_ = 0;                        // the watch's thread's
  bool goneNoted_ = false;                        // the watch's thread's
  std::unique_ptr<std::atomic<uint8_t>[]> gone_;  // [nranks]: its process has ended
  std::atomic<uint32_t> goneCount_{0};
  mutable std::mutex faultMutex_;
  std::optional<PeerFault> fault_;
  std::function<void(const PeerFault&)> sink_;
  bool sunk_ = false;
  std::thread thread_;
};

}  // namespace weft::transport
