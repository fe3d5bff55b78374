// The one small interface the host proxy drives a network library through (UCX in transport/ucx/,
// libfabric in transport/ofi/), and what both share: the message that carries a signal or flagged
// data, how the receiver applies it, and the per-peer queue that holds a message back until the
// bytes put to that peer before it are visible there.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace weft::transport {

// What a back-end needs of the communicator's bootstrap (runtime/ implements it).
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // Every rank contributes `bytes`; `all` receives nranks * bytes in rank order.
  virtual void allGather(const void* mine, size_t bytes, void* all) = 0;
};

// Memory a back-end registers: this rank's heap (peers write into it) and, per peer reached
// through the proxy, this rank's mirror of that peer's heap (what puts read from; same size).
struct Region {
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
};

// The first failure a back-end saw: the peer (or -1) and the library's own words.
struct PeerFault {
  int peer = -1;
  std::string what;
};

// kind values of message(): the trigger kinds they come from (device/proxy_device.hpp).
constexpr uint32_t kMsgSignalStore = 3, kMsgSignalAdd = 4, kMsgDeliver = 5;
constexpr uint32_t kMsgGoodbye = 6;  // value: the sender's rank; applied by the back-end itself
constexpr uint32_t kMsgHello = 7;    // value: the sender's rank; sent once at connect (UCX's wire-up)
// Mirror rows carried in the message and copied into the peer's heap by its proxy: `value` is
// rowsWord(rows, rowBytes, stride) (device/proxy_device.hpp), the payload the rows back to back.
// Small puts go this way (Proxy: proxy_eager_bytes), so that a signal after them needs no flush.
constexpr uint32_t kMsgRows = 8;
// Rows the sender's device laid back to back in its mirror from `offset` (TriggerKind::kPutPacked):
// the payload is that one run, sent from the mirror in place, and the receiving proxy puts row i
// at offset + i * stride. `value` as kMsgRows'. Never cut: the device packs at most a message.
constexpr uint32_t kMsgPacked = 9;
// Several heap messages to one peer as one wire message: `value` is the number of parts, the
// payload each part's WirePart and then that part's payload, in the order the device posted them.
// Over sockets a message's fixed cost in both proxies' threads, not its bytes, sets the time of
// the ops of a few KB to ~128 KB (a tile's put, the signature word and the flag after it are three
// messages), so the proxy batches the small messages it finds in the ring together for one peer
// (Proxy::stage). The receiver checks the whole batch's framing before it applies anything; then
// its data parts land at once, and its signals in their order once their turn has come.
constexpr uint32_t kMsgBatch = 10;
// A message carries at most this many payload bytes (a multiple of 16): flagged data and rows
// are cut into messages of their own at that size.
constexpr uint64_t kMsgPayloadMax = 65536;

// One heap message as the proxy cut it (a signal, flagged data, rows): a part of a batch.
struct MessagePart {
  uint32_t kind;
  uint64_t offset, value;
};

class ArrivalOrder;

class NetBackend {
 public:
  virtual ~NetBackend() = default;
  // "ucx" or "ofi".
  virtual const char* name() const = 0;
  // One line for logs and weftctl: the library version and the transports or provider in use.
  virtual std::string describe() const = 0;
  // Local: opens the library and registers `heap` and the mirrors (mirrors[peer] for every peer
  // with viaProxy[peer]). What arrives is applied through `arrivals` (shared by every lane of the
  // proxy; it outlives the back-end). Throws weft::Error naming what failed.
  virtual void open(const std::vector<uint8_t>& viaProxy, Region heap, const std::vector<Region>& mirrors,
                    ArrivalOrder* arrivals) = 0;
  // Collective over `ex`, after every rank opened: exchanges addresses and keys and connects to
  // every proxy peer. Throws weft::Error naming what failed.
  virtual void connect(Exchange& ex) = 0;
  // RMA write of this rank's mirror bytes [offset, offset + bytes) of `peer` into its heap.
  virtual void put(int peer, uint64_t offset, uint64_t bytes) = 0;
  // One wire message to `peer`, sent only once every byte put to it before through this back-end
  // is visible there: a signal (store or add `value` at `offset`), mirror bytes stored word by
  // word (kMsgDeliver), or mirror rows copied into place (kMsgRows, kMsgPacked); its payload at most
  // messageBytes() (cutMessage). `seq`: its number among the heap messages to `peer` (the proxy
  // numbers them in the order the device posted them, whichever lane carries each).
  virtual void message(int peer, uint32_t kind, uint64_t offset, uint64_t value, uint32_t seq) = 0;
  // As message(), for two or more parts as one wire message (kMsgBatch): batchBytes(parts) at most
  // messageBytes().
  virtual void batch(int peer, std::vector<MessagePart> parts, uint32_t seq) = 0;
  // Completes what it can and applies the messages that arrived. Returns whether anything moved.
  virtual bool progress() = 0;
  // `peer`'s process has ended (the proxy watches the peers of its host): a fault, unless the peer
  // said goodbye first, and nothing more is sent to it or held for it. A library's shared-memory
  // transport may guard a peer's queue with a lock in that peer's memory, which a process killed
  // while holding it never releases: the next send to it would spin for good. Called from the
  // thread that drives this back-end.
  virtual void peerGone(int peer, const std::string& why) = 0;
  // How long one operation may be refused for want of resources (a peer that no longer takes
  // data) before the peer counts as failed: timeout_s, and little while stopping.
  void setPatience(double seconds) { patienceNs_ = static_cast<uint64_t>(seconds * 1e9); }
  // The most payload bytes one message carries without a handshake of the library's own (a
  // rendezvous): a multiple of 16, at most kMsgPayloadMax. Rows and small puts are cut to it.
  virtual uint64_t messageBytes() const { return kMsgPayloadMax; }
  // Whether the library's writes are copies through the hosts' CPUs (tcp, shared memory), not a
  // NIC's RDMA: then several lanes, each a thread with connections of its own, move more.
  virtual bool copiesWrites() const = 0;
  // Operations issued and not yet complete (puts and messages).
  virtual uint64_t outstanding() const = 0;
  // Tells every peer that this rank is closing its connections: a peer's connection failing after
  // it said so is no fault. Then outstanding() counts these messages until they are sent.
  virtual void sayGoodbye() = 0;
  // The first failure, if any.
  virtual std::optional<PeerFault> fault() const = 0;

 protected:
  uint64_t patienceNs_ = 30'000'000'000ull;
};

struct WireMessage {
  uint32_t kind;
  uint32_t bytes;  // payload bytes that follow (kMsgDeliver, kMsgRows, kMsgPacked)
  uint32_t from;   // the sender's rank
  uint32_t seq;    // the sender's count of heap messages to this rank before this one
  uint64_t offset;
  uint64_t value;
};
static_assert(sizeof(WireMessage) == 32, "a wire struct");

// Whether a message kind writes the heap (and so is numbered and applied in the sender's order).
inline bool writesHeap(uint32_t kind) { return kind != kMsgGoodbye && kind != kMsgHello; }

// A part's header in a kMsgBatch payload; its payload follows it.
struct WirePart {
  uint32_t kind;
  uint32_t bytes;  // the part's payload bytes
  uint64_t offset;
  uint64_t value;  // as a lone message's
};
static_assert(sizeof(WirePart) == 24, "a wire struct");

// The rows of a kMsgRows or kMsgPacked `value`.
struct Rows {
  uint64_t rows, rowBytes, stride;
  uint64_t payload() const { return rows * rowBytes; }
  uint64_t span() const { return rows ? (rows - 1) * stride + rowBytes : 0; }
};
Rows rowsOf(uint64_t value);
uint64_t rowsValue(const Rows& r);
// The payload a held message carries: its bytes of the mirror, the rows of kMsgRows back to back
// (kMsgPacked's are already).
uint64_t payloadBytes(uint32_t kind, uint64_t value);
void packPayload(const uint8_t* mirror, uint32_t kind, uint64_t offset, uint64_t value, uint8_t* out);
// A batch's payload: every part's header and payload.
uint64_t batchBytes(const std::vector<MessagePart>& parts);
void packBatch(const uint8_t* mirror, const std::vector<MessagePart>& parts, uint8_t* out);

// Cuts a message (flagged data or rows) into wire messages of at most payloadMax bytes, whole rows
// each, and hands each to piece(kind, offset, value); a signal is one piece.
template <class Piece>
void cutMessage(uint32_t kind, uint64_t offset, uint64_t value, uint64_t payloadMax, Piece&& piece) {
  if (kind == kMsgDeliver) {
    for (uint64_t at = 0; at < value; at += payloadMax) piece(kind, offset + at, std::min(payloadMax, value - at));
  } else if (kind == kMsgRows) {
    // Whole rows per message; the proxy sends no row longer than a message holds.
    const Rows r = rowsOf(value);
    const uint64_t per = std::max<uint64_t>(1, payloadMax / std::max<uint64_t>(1, r.rowBytes));
    for (uint64_t at = 0; at < r.rows; at += per)
      piece(kind, offset + at * r.stride, rowsValue(Rows{std::min(per, r.rows - at), r.rowBytes, r.stride}));
  } else {
    piece(kind, offset, value);
  }
}

// Applies a message that arrived to this rank's heap. Returns an error text for a malformed one
// (which is dropped), else empty.
std::string applyMessage(Region heap, const WireMessage& m, const void* payload, uint64_t payloadBytes);

// The receiving end of every peer's messages, shared by the proxy's lanes (thread-safe). Data
// (rows, flagged words) is applied the moment it arrives, whatever its place; a signal is applied
// only once every earlier message of its sender (`seq`) has been, so that its reader never sees
// stale bytes. Neither UCX's active messages nor libfabric's sends promise order on every
// transport, and a sender's lanes overtake each other. Data needs no order of its own: a sender
// rewrites heap bytes only after a signal from their reader, which follows their earlier copy.
// A batch's data is applied as it comes, then its signals in their order once their turn has
// come: a signal may so go after data posted behind it, never before data posted ahead of it.
class ArrivalOrder {
 public:
  explicit ArrivalOrder(int nranks) : senders_(nranks) {}
  // Returns an error text for a malformed or impossible message (dropped), else empty.
  std::string arrive(Region heap, const WireMessage& m, const void* payload, uint64_t payloadBytes);
  // Messages that came before an earlier one of their sender: signals held, data applied ahead.
  size_t early() const;
  // How far ahead of the first missing one a sender's message may come before the sender counts
  // as broken.
  static constexpr uint32_t kEarlyMax = 16384;

 private:
  enum State : uint8_t { kMissing = 0, kApplied = 1, kHeldSignal = 2 };
  struct Sender {
    uint32_t next = 0;           // every message before this one is applied
    std::vector<uint8_t> ahead;  // State by seq % kEarlyMax; allocated when one first comes early
    size_t appliedAhead = 0;     // kApplied entries in `ahead`
    // Held, by seq: a signal, or a batch's signals in order (its data is applied).
    std::unordered_map<uint32_t, std::vector<WireMessage>> signals;
  };
  // Under mutex_: s.next is applied (`bad`: what applying it said); then every message of `s`
  // whose turn has come. Returns the first error text.
  std::string advance(Region heap, Sender& s, std::string bad);
  mutable std::mutex mutex_;
  std::vector<Sender> senders_;
};

// Messages held per peer until the puts before them are visible at that peer. `done` is the
// number of that peer's puts known to be visible (remotely complete), counted in issue order.
class OrderedMessages {
 public:
  explicit OrderedMessages(int nranks) : peers_(nranks) {}
  struct Held {
    uint32_t kind;
    uint64_t offset, value;
    uint32_t seq;
    uint64_t putsBefore;             // the peer's puts issued before this message
    std::vector<MessagePart> parts;  // kMsgBatch's
    // Its payload's bytes, packed from the mirror of its peer by pack().
    uint64_t payload() const { return kind == kMsgBatch ? batchBytes(parts) : payloadBytes(kind, value); }
    void pack(const uint8_t* mirror, uint8_t* out) const;
    // Its header, from rank `from`.
    WireMessage wire(uint32_t from) const;
  };
  void notePut(int peer) { ++peers_[peer].putsIssued; }
  uint64_t putsIssued(int peer) const { return peers_[peer].putsIssued; }
  // One wire message of a back-end's message() (already cut to its size), or its batch().
  void hold(int peer, uint32_t kind, uint64_t offset, uint64_t value, uint32_t seq) {
    peers_[peer].held.push_back(Held{kind, offset, value, seq, peers_[peer].putsIssued, {}});
  }
  void hold(int peer, std::vector<MessagePart> parts, uint32_t seq) {
    const auto n = static_cast<uint64_t>(parts.size());
    peers_[peer].held.push_back(Held{kMsgBatch, 0, n, seq, peers_[peer].putsIssued, std::move(parts)});
  }
  bool holding(int peer) const { return !peers_[peer].held.empty(); }
  // A failed peer's: nothing of it will be sent.
  void drop(int peer) { peers_[peer].held.clear(); }
  size_t held() const {
    size_t n = 0;
    for (const auto& p : peers_) n += p.held.size();
    return n;
  }
  // Hands send(held) every message of `peer` whose puts are visible (done of them), in order;
  // stops at the first that send refuses (returns false: try again later).
  template <class Send>
  bool release(int peer, uint64_t done, Send&& send) {
    bool any = false;
    auto& q = peers_[peer].held;
    while (!q.empty() && q.front().putsBefore <= done && send(q.front())) {
      q.pop_front();
      any = true;
    }
    return any;
  }

 private:
  struct Peer {
    uint64_t putsIssued = 0;
    std::deque<Held> held;
  };
  std::vector<Peer> peers_;
};

// The back-ends this build has ("ucx", "ofi"), in the order `auto` tries them.
std::vector<std::string> backendsBuilt();
// A back-end by name; throws weft::Error (kNotSupported) when it is not built.
std::unique_ptr<NetBackend> makeBackend(const std::string& name);
// One line per back-end for weftctl: version, and the transports or providers it finds here.
std::string backendsSummary();

}  // namespace weft::transport
