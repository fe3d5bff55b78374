// The proxy's libfabric back-end: a reliable-datagram endpoint (FI_EP_RDM) with RMA and messages,
// one address vector of every rank, the heap registered for remote writes and each mirror for
// local reads. Tiles go by fi_writemsg with FI_DELIVERY_COMPLETE, so a write's completion says its
// bytes are visible at the target; a signal or flagged data is a message sent once every write to
// that peer before it has completed. FI_PROVIDER (and the providers' own variables) choose the
// provider, as libfabric users expect: tcp (through ofi_rxm for FI_EP_RDM), shm, verbs, efa, cxi.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "device/primitives_device.hpp"
#include "transport/net/backend.hpp"
#include "transport/p2p/shm_segment.hpp"

namespace weft::transport {
namespace {

constexpr uint32_t kApiVersion = FI_VERSION(1, 9);
constexpr size_t kRecvBuffers = 64;
constexpr size_t kSendBuffers = 64;
constexpr size_t kMsgBytes = sizeof(WireMessage) + kMsgPayloadMax;
constexpr size_t kNameBytes = 256;

std::string fiText(ssize_t rc) { return fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)); }

[[noreturn]] void fail(const std::string& what, ssize_t rc) {
  throw Error(Code::kTransport, "libfabric: " + what + ": " + fiText(rc));
}

// The most payload a message carries in one eager send. ofi_rxm (the tcp provider's FI_EP_RDM)
// sends a message that fits its buffer (FI_OFI_RXM_BUFFER_SIZE, 16 KiB by default, its own header
// included) at once and a larger one by segmentation or rendezvous: on 2 H200 the 1 MiB AllReduce,
// whose 16 KiB tiles then went as such messages, took 3.5 ms against 1.4 as writes. So messages
// stay inside that buffer, with room for rxm's header and weft's; other providers get the same.
// FI_OFI_RXM_BUFFER_SIZE as this process reads it; 0 where it is unset (or not a number).
uint64_t rxmBufferSetting() {
  const char* v = getenv("FI_OFI_RXM_BUFFER_SIZE");
  return v ? std::strtoull(v, nullptr, 10) : 0;
}

// rxm's own default buffer where FI_OFI_RXM_BUFFER_SIZE is unset.
constexpr uint64_t kRxmDefaultBuffer = 16384;

uint64_t eagerMessageBytes() {
  const uint64_t buffer = rxmBufferSetting() ? rxmBufferSetting() : kRxmDefaultBuffer;
  const uint64_t room = buffer > 1024 ? (buffer - 256) / 16 * 16 : 768;
  return std::min<uint64_t>(room, kMsgPayloadMax);
}

// What every completion's context points at.
struct Op {
  fi_context2 ctx;  // first: libfabric hands back &ctx
  enum Kind { kWrite, kSend, kRecv } kind;
  int peer;
  uint64_t seq;     // kWrite: its place among the writes to the peer
  uint8_t* buffer;  // kSend/kRecv: kMsgBytes of registered memory
};

// A write the proxy asked for: mirror bytes [offset, offset + bytes) to the same place at the peer.
struct Write {
  uint64_t offset, bytes, seq;
};

class OfiBackend final : public NetBackend {
 public:
  ~OfiBackend() override;
  const char* name() const override { return "ofi"; }
  std::string describe() const override { return describe_; }
  void open(const std::vector<uint8_t>& viaProxy, Region heap, const std::vector<Region>& mirrors,
            ArrivalOrder* arrivals) override;
  void connect(Exchange& ex) override;
  void put(int peer, uint64_t offset, uint64_t bytes) override;
  void message(int peer, uint32_t kind, uint64_t offset, uint64_t value, uint32_t seq) override;
  void batch(int peer, std::vector<MessagePart> parts, uint32_t seq) override;
  bool progress() override;
  void peerGone(int peer, const std::string& why) override;
  // The providers that move bytes with the CPUs: tcp (ofi_rxm over it), shm, sockets, udp.
  bool copiesWrites() const override {
    for (const char* p : {"tcp", "shm", "sockets", "udp"})
      if (provider_.find(p) != std::string::npos) return true;
    return false;
  }
  // What a failed peer has posted never counts: its completions may never come.
  uint64_t outstanding() const override { return inFlight_ - lostInFlight_ + held_->held(); }
  uint64_t messageBytes() const override { return messageBytes_; }
  std::optional<PeerFault> fault() const override { return fault_; }
  void sayGoodbye() override;

 private:
  struct Peer {
    fi_addr_t addr = FI_ADDR_UNSPEC;
    uint64_t key = 0, base = 0;  // its heap's key, and the address its writes name (0: offsets)
    fid_mr* mirrorMr = nullptr;
    std::set<uint64_t> open;     // writes issued and not complete, by seq
    std::deque<Write> unposted;  // writes not yet taken by the endpoint, in order
    uint64_t refusedSince = 0;   // when the endpoint began refusing the first of them (0: it is not)
    uint64_t posted = 0;         // operations the endpoint took for it and has not completed
    bool failed = false;
    bool closed = false;  // it said goodbye
    // Every write before this one has completed: its bytes are visible at the peer.
    uint64_t visible(uint64_t issued) const { return open.empty() ? issued : *open.begin(); }
  };
  void noteFault(int peer, const std::string& what) {
    if (peer >= 0 && peers_[peer].closed) return;
    if (!fault_) fault_ = PeerFault{peer, "libfabric (" + provider_ + "): " + what};
  }
  void postRecv(Op* op);
  bool drainCq();
  Op* takeSendOp();
  bool sendHeld(int peer, const OrderedMessages::Held& h);
  bool postWrites(int peer);
  void failPeer(int peer);
  // An operation's completion, or its error.
  void completed(Op* op);
  fid_mr* registerRegion(Region r, uint64_t access, uint64_t key);

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_ep* ep_ = nullptr;
  bool enabled_ = false;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_mr* heapMr_ = nullptr;
  fid_mr* msgMr_ = nullptr;
  bool localMr_ = false;  // FI_MR_LOCAL: local buffers need a descriptor
  bool virtAddr_ = false;
  uint64_t maxWrite_ = 0;
  uint64_t messageBytes_ = kMsgPayloadMax;
  Region heap_;
  std::vector<Region> mirrors_;
  std::vector<uint8_t> viaProxy_;
  std::vector<Peer> peers_;
  std::vector<uint8_t> msgArea_;  // kRecvBuffers receive buffers, then the send buffers
  std::vector<Op> recvOps_, sendOps_;
  std::vector<Op*> freeSends_;
  std::vector<Op> writeOps_;  // a pool: a write's op comes back with its completion
  std::vector<Op*> freeWrites_;
  uint64_t inFlight_ = 0;      // writes queued or posted, messages posted
  uint64_t lostInFlight_ = 0;  // of those, posted to peers that failed since
  int me_ = -1;
  std::unique_ptr<OrderedMessages> held_;
  ArrivalOrder* arrivals_ = nullptr;
  std::optional<PeerFault> fault_;
  std::string provider_, describe_;
};

fid_mr* OfiBackend::registerRegion(Region r, uint64_t access, uint64_t key) {
  fid_mr* mr = nullptr;
  if (const int rc = fi_mr_reg(domain_, r.base, r.bytes, access, 0, key, 0, &mr, nullptr); rc != 0)
    fail("registering " + std::to_string(r.bytes) + " bytes", rc);
  if (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) {
    if (const int rc = fi_mr_bind(mr, &ep_->fid, 0); rc != 0) fail("binding a registration", rc);
    if (const int rc = fi_mr_enable(mr); rc != 0) fail("enabling a registration", rc);
  }
  return mr;
}

void OfiBackend::open(const std::vector<uint8_t>& viaProxy, Region heap, const std::vector<Region>& mirrors,
                      ArrivalOrder* arrivals) {
  heap_ = heap;
  mirrors_ = mirrors;
  viaProxy_ = viaProxy;
  const int n = static_cast<int>(viaProxy.size());
  peers_.resize(n);
  arrivals_ = arrivals;

  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;  // the init thread, then only the proxy thread
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  const int rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints, &info_);
  fi_freeinfo(hints);
  const char* wanted = getenv("FI_PROVIDER");
  if (rc != 0 || info_ == nullptr)
    throw Error(Code::kNotSupported, std::string("libfabric: no provider") +
                                         (wanted ? std::string(" among FI_PROVIDER=") + wanted : std::string()) +
                                         " offers a reliable-datagram endpoint (FI_EP_RDM) with RMA writes and "
                                         "messages: " +
                                         fiText(rc));
  provider_ = info_->fabric_attr->prov_name;
  localMr_ = (info_->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
  virtAddr_ = (info_->domain_attr->mr_mode & (FI_MR_VIRT_ADDR | FI_MR_BASIC)) != 0;
  maxWrite_ = info_->ep_attr->max_msg_size ? info_->ep_attr->max_msg_size : (uint64_t{1} << 30);
  messageBytes_ = eagerMessageBytes();
  held_ = std::make_unique<OrderedMessages>(n);

  if (const int r = fi_fabric(info_->fabric_attr, &fabric_, nullptr); r != 0) fail("fi_fabric", r);
  if (const int r = fi_domain(fabric_, info_, &domain_, nullptr); r != 0) fail("fi_domain", r);
  fi_cq_attr cqa{};
  // With the length of each receive: a message is parsed only as far as it arrived.
  cqa.format = FI_CQ_FORMAT_MSG;
  cqa.size = 8192;
  if (const int r = fi_cq_open(domain_, &cqa, &cq_, nullptr); r != 0) fail("fi_cq_open", r);
  fi_av_attr ava{};
  ava.type = FI_AV_TABLE;
  if (const int r = fi_av_open(domain_, &ava, &av_, nullptr); r != 0) fail("fi_av_open", r);
  if (const int r = fi_endpoint(domain_, info_, &ep_, nullptr); r != 0) fail("fi_endpoint", r);
  if (const int r = fi_ep_bind(ep_, &av_->fid, 0); r != 0) fail("binding the address vector", r);
  if (const int r = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV); r != 0) fail("binding the queue", r);
  if (provider_ == "shm") {
    // shm names its region after the process id unless told otherwise, and refuses a name that a
    // killed process of an earlier job left behind when this process got its pid. A name of
    // weft's own never repeats, and the sweep of weft's leftovers (ShmSegment) removes it once
    // its process is gone.
    const std::string name = ShmSegment::uniqueName("ofi").substr(1);
    if (const int r = fi_setname(&ep_->fid, const_cast<char*>(name.c_str()), name.size() + 1); r != 0)
      fail("naming the shm endpoint", r);
  }
  if (const int r = fi_enable(ep_); r != 0) fail("fi_enable", r);
  enabled_ = true;

  // Keys this process picks where the provider does not: the heap 1, the message buffers 2,
  // peer p's mirror 3 + p.
  heapMr_ = registerRegion(heap, FI_REMOTE_WRITE | FI_WRITE | FI_READ, 1);
  msgArea_.assign((kRecvBuffers + kSendBuffers) * kMsgBytes, 0);
  msgMr_ = registerRegion(Region{msgArea_.data(), msgArea_.size()}, FI_SEND | FI_RECV, 2);
  for (int r = 0; r < n; ++r)
    if (viaProxy[r]) peers_[r].mirrorMr = registerRegion(mirrors[r], FI_WRITE | FI_READ | FI_SEND, 3 + r);
}

void OfiBackend::connect(Exchange& ex) {
  const int n = ex.nranks(), me = ex.rank();
  me_ = me;
  struct Card {
    uint64_t key, base, nameBytes;
    uint64_t rxmBuffer;  // FI_OFI_RXM_BUFFER_SIZE as this rank reads it (0: unset)
    uint8_t name[kNameBytes];
  } mine{};
  size_t nameBytes = kNameBytes;
  if (const int r = fi_getname(&ep_->fid, mine.name, &nameBytes); r != 0) fail("fi_getname", r);
  mine.nameBytes = nameBytes;
  mine.key = fi_mr_key(heapMr_);
  mine.base = virtAddr_ ? reinterpret_cast<uint64_t>(heap_.base) : 0;
  mine.rxmBuffer = rxmBufferSetting();
  std::vector<Card> cards(n);
  ex.allGather(&mine, sizeof mine, cards.data());
  // ofi_rxm refuses a connection whose eager limit differs from its own, which would surface as a
  // connection that never comes up: ranks that set its buffer differently fail here, all alike.
  auto setting = [](uint64_t b) { return b ? std::to_string(b) : std::string("unset"); };
  if (provider_.find("ofi_rxm") != std::string::npos)
    for (int r = 0; r < n; ++r)
      if (cards[r].rxmBuffer != mine.rxmBuffer)
        throw Error(Code::kInvalidUsage, "libfabric (" + provider_ + "): FI_OFI_RXM_BUFFER_SIZE is " +
                                             setting(cards[r].rxmBuffer) + " on rank " + std::to_string(r) + " and " +
                                             setting(mine.rxmBuffer) + " on rank " + std::to_string(me) +
                                             "; every rank must set it alike (ofi_rxm connects only equal eager "
                                             "limits)");
  for (int r = 0; r < n; ++r) {
    if (r == me || !viaProxy_[r]) continue;
    if (fi_av_insert(av_, cards[r].name, 1, &peers_[r].addr, 0, nullptr) != 1)
      throw Error(Code::kTransport,
                  "libfabric (" + provider_ + "): rank " + std::to_string(r) + "'s address is not reachable");
    peers_[r].key = cards[r].key;
    peers_[r].base = cards[r].base;
  }

  recvOps_.resize(kRecvBuffers);
  for (size_t i = 0; i < kRecvBuffers; ++i) {
    recvOps_[i].kind = Op::kRecv;
    recvOps_[i].peer = -1;
    recvOps_[i].buffer = msgArea_.data() + i * kMsgBytes;
    postRecv(&recvOps_[i]);
  }
  sendOps_.resize(kSendBuffers);
  for (size_t i = 0; i < kSendBuffers; ++i) {
    sendOps_[i].kind = Op::kSend;
    sendOps_[i].buffer = msgArea_.data() + (kRecvBuffers + i) * kMsgBytes;
    freeSends_.push_back(&sendOps_[i]);
  }
  writeOps_.resize(4096);
  for (auto& op : writeOps_) {
    op.kind = Op::kWrite;
    freeWrites_.push_back(&op);
  }
  describe_ = "libfabric " + std::to_string(FI_MAJOR(fi_version())) + "." + std::to_string(FI_MINOR(fi_version())) +
              " provider " + provider_ + " (domain " + info_->domain_attr->name + ")";
}

OfiBackend::~OfiBackend() {
  auto close = [](fid* f) {
    if (f) fi_close(f);
  };
  if (enabled_) fi_cancel(&ep_->fid, nullptr);  // a provider may crash on one never enabled
  close(ep_ ? &ep_->fid : nullptr);
  for (auto& p : peers_) close(p.mirrorMr ? &p.mirrorMr->fid : nullptr);
  close(msgMr_ ? &msgMr_->fid : nullptr);
  close(heapMr_ ? &heapMr_->fid : nullptr);
  close(av_ ? &av_->fid : nullptr);
  close(cq_ ? &cq_->fid : nullptr);
  close(domain_ ? &domain_->fid : nullptr);
  close(fabric_ ? &fabric_->fid : nullptr);
  if (info_) fi_freeinfo(info_);
}

void OfiBackend::postRecv(Op* op) {
  for (const uint64_t start = prim::nowNs();;) {
    const ssize_t rc =
        fi_recv(ep_, op->buffer, kMsgBytes, localMr_ ? fi_mr_desc(msgMr_) : nullptr, FI_ADDR_UNSPEC, &op->ctx);
    if (rc == 0) return;
    if (rc != -FI_EAGAIN || prim::nowNs() - start > patienceNs_) {
      noteFault(-1, "posting a receive failed: " + fiText(rc));
      return;
    }
    fi_cq_read(cq_, nullptr, 0);  // progress
  }
}

// A write is queued on its peer and posted from there, so that a peer that takes no more (a full
// queue, a lost connection) holds up only its own writes; one refused for longer than the
// patience fails that peer.
void OfiBackend::put(int peer, uint64_t offset, uint64_t bytes) {
  Peer& p = peers_[peer];
  for (uint64_t at = 0; at < bytes; at += maxWrite_) {
    const uint64_t seq = held_->putsIssued(peer);
    held_->notePut(peer);
    if (p.failed) continue;  // nothing will land; what is held behind it is dropped in turn
    p.open.insert(seq);
    p.unposted.push_back(Write{offset + at, std::min(maxWrite_, bytes - at), seq});
    ++inFlight_;
  }
  postWrites(peer);
}

bool OfiBackend::postWrites(int peer) {
  Peer& p = peers_[peer];
  bool moved = false;
  while (!p.unposted.empty() && !p.failed) {
    const Write& w = p.unposted.front();
    ssize_t rc = -FI_EAGAIN;
    if (!freeWrites_.empty()) {
      Op* op = freeWrites_.back();
      op->peer = peer;
      op->seq = w.seq;
      iovec iov{mirrors_[peer].base + w.offset, w.bytes};
      void* desc = localMr_ ? fi_mr_desc(p.mirrorMr) : nullptr;
      fi_rma_iov rma{p.base + w.offset, w.bytes, p.key};
      fi_msg_rma msg{};
      msg.msg_iov = &iov;
      msg.desc = &desc;
      msg.iov_count = 1;
      msg.addr = p.addr;
      msg.rma_iov = &rma;
      msg.rma_iov_count = 1;
      msg.context = &op->ctx;
      rc = fi_writemsg(ep_, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
      if (rc == 0) freeWrites_.pop_back();
    }
    if (rc == 0) {
      ++p.posted;
      p.unposted.pop_front();
      p.refusedSince = 0;
      moved = true;
      continue;
    }
    const uint64_t now = prim::nowNs();
    if (rc == -FI_EAGAIN && p.refusedSince == 0) p.refusedSince = now;
    if (rc == -FI_EAGAIN && now - p.refusedSince <= patienceNs_) break;
    noteFault(peer, "a write of " + std::to_string(w.bytes) + " bytes to rank " + std::to_string(peer) + " failed: " +
                        fiText(rc) + (rc == -FI_EAGAIN ? " for " + std::to_string(patienceNs_ / 1000000) + " ms" : ""));
    failPeer(peer);
  }
  return moved;
}

// Drops what was queued for a failed peer: its writes count as done (nothing will land); what is
// held for it is dropped by the next progress() (this may run inside a release of it).
void OfiBackend::failPeer(int peer) {
  Peer& p = peers_[peer];
  if (!p.failed) lostInFlight_ += p.posted;
  p.failed = true;
  for (const Write& w : p.unposted) {
    p.open.erase(w.seq);
    --inFlight_;
  }
  p.unposted.clear();
}

void OfiBackend::peerGone(int peer, const std::string& why) {
  if (peers_[peer].failed) return;
  while (drainCq()) {
  }  // a goodbye that came before the end makes it no fault
  noteFault(peer, why);
  failPeer(peer);
}

void OfiBackend::completed(Op* op) {
  --inFlight_;
  if (op->peer < 0) return;
  Peer& p = peers_[op->peer];
  --p.posted;
  if (p.failed) --lostInFlight_;
}

void OfiBackend::message(int peer, uint32_t kind, uint64_t offset, uint64_t value, uint32_t seq) {
  held_->hold(peer, kind, offset, value, seq);
}

void OfiBackend::batch(int peer, std::vector<MessagePart> parts, uint32_t seq) {
  held_->hold(peer, std::move(parts), seq);
}

void OfiBackend::sayGoodbye() {
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
    if (viaProxy_[r] && !peers_[r].failed) held_->hold(r, kMsgGoodbye, 0, static_cast<uint64_t>(me_), 0);
}

bool OfiBackend::sendHeld(int peer, const OrderedMessages::Held& h) {
  Peer& p = peers_[peer];
  if (p.failed) return true;  // dropped: the fault is recorded, the op will fail
  Op* op = freeSends_.empty() ? nullptr : freeSends_.back();
  if (!op) return false;
  const WireMessage m = h.wire(static_cast<uint32_t>(me_));
  memcpy(op->buffer, &m, sizeof m);
  if (m.bytes) {
    h.pack(mirrors_[peer].base, op->buffer + sizeof m);
    // The workers rewrite these bytes only after the peer has them (the ops' epochs): a
    // causality through the peer that ThreadSanitizer cannot see, so it is told (primitives_device.hpp).
    prim::crossProcessRelease();
  }
  const ssize_t rc =
      fi_send(ep_, op->buffer, sizeof m + m.bytes, localMr_ ? fi_mr_desc(msgMr_) : nullptr, p.addr, &op->ctx);
  const uint64_t now = prim::nowNs();
  if (rc == -FI_EAGAIN && p.refusedSince == 0) p.refusedSince = now;
  if (rc == -FI_EAGAIN && now - p.refusedSince <= patienceNs_) return false;
  if (rc != 0) {
    noteFault(peer, "a message to rank " + std::to_string(peer) + " failed: " + fiText(rc));
    failPeer(peer);
    return true;
  }
  p.refusedSince = 0;
  freeSends_.pop_back();
  op->peer = peer;
  ++inFlight_;
  ++p.posted;
  return true;
}

bool OfiBackend::drainCq() {
  fi_cq_msg_entry entries[32];
  const ssize_t got = fi_cq_read(cq_, entries, 32);
  if (got == -FI_EAGAIN) return false;
  if (got == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    if (fi_cq_readerr(cq_, &err, 0) == 1) {
      Op* op = static_cast<Op*>(err.op_context);
      const int peer = op ? op->peer : -1;
      noteFault(peer, std::string("an operation") + (peer >= 0 ? " to rank " + std::to_string(peer) : "") +
                          " failed: " + fi_cq_strerror(cq_, err.prov_errno, err.err_data, nullptr, 0) + " (" +
                          fiText(err.err) + ")");
      if (op && op->kind != Op::kRecv) {
        completed(op);
        if (op->kind == Op::kWrite) {
          if (peer >= 0) peers_[peer].open.erase(op->seq);
          freeWrites_.push_back(op);
        } else {
          freeSends_.push_back(op);
        }
        if (peer >= 0) failPeer(peer);
      } else if (op && err.err != FI_ECANCELED) {
        // A receive that failed (a message cut short, say) gives its buffer back to the queue, or
        // each such error would leave one buffer fewer for every later message.
        postRecv(op);
      }
    }
    return true;
  }
  if (got < 0) {
    noteFault(-1, "reading the completion queue failed: " + fiText(got));
    return false;
  }
  for (ssize_t i = 0; i < got; ++i) {
    Op* op = static_cast<Op*>(entries[i].op_context);
    switch (op->kind) {
      case Op::kWrite:
        completed(op);
        peers_[op->peer].open.erase(op->seq);
        freeWrites_.push_back(op);
        break;
      case Op::kSend:
        completed(op);
        freeSends_.push_back(op);
        break;
      case Op::kRecv: {
        // What arrived, not what its header says: a message cut short is refused (arrive compares
        // the two), never read on into the buffer's bytes from an earlier message.
        const uint64_t len = entries[i].len;
        if (len < sizeof(WireMessage)) {
          noteFault(-1, "a message of " + std::to_string(len) + " bytes, shorter than its header");
          postRecv(op);
          break;
        }
        WireMessage m;
        memcpy(&m, op->buffer, sizeof m);
        if (m.kind == kMsgGoodbye) {
          if (m.value < peers_.size()) peers_[m.value].closed = true;
          postRecv(op);
          break;
        }
        const uint64_t payload = len - sizeof m;
        const std::string bad = payload > kMsgPayloadMax ? std::string("a message longer than its buffer")
                                                         : arrivals_->arrive(heap_, m, op->buffer + sizeof m, payload);
        if (!bad.empty()) noteFault(-1, bad);
        postRecv(op);
        break;
      }
    }
  }
  return got > 0;
}

bool OfiBackend::progress() {
  bool moved = false;
  while (drainCq()) moved = true;
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
    if (!peers_[r].unposted.empty()) moved |= postWrites(r);
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r) {
    if (!held_->holding(r)) continue;
    if (peers_[r].failed) {
      held_->drop(r);  // nothing of it will be sent
      moved = true;
      continue;
    }
    moved |= held_->release(r, peers_[r].visible(held_->putsIssued(r)),
                            [&](const OrderedMessages::Held& h) { return sendHeld(r, h); });
  }
  return moved;
}

}  // namespace

std::unique_ptr<NetBackend> makeOfiBackend() { return std::make_unique<OfiBackend>(); }

std::string ofiSummary() {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA;
  fi_info* list = nullptr;
  std::string providers;
  if (fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints, &list) == 0) {
    for (fi_info* i = list; i; i = i->next) {
      const std::string p = i->fabric_attr->prov_name;
      if (providers.find(p) == std::string::npos) providers += (providers.empty() ? "" : ", ") + p;
    }
    fi_freeinfo(list);
  }
  fi_freeinfo(hints);
  const char* wanted = getenv("FI_PROVIDER");
  return "libfabric: " + std::to_string(FI_MAJOR(fi_version())) + "." + std::to_string(FI_MINOR(fi_version())) +
         ", providers with FI_EP_RDM + RMA + messages: " + (providers.empty() ? std::string("none") : providers) +
         (wanted ? std::string(" (FI_PROVIDER=") + wanted + ")" : std::string()) + "; messages of up to " +
         std::to_string(eagerMessageBytes()) + " bytes (FI_OFI_RXM_BUFFER_SIZE=" +
         (rxmBufferSetting()
              ? std::to_string(rxmBufferSetting())
              : "unset: " + std::to_string(kRxmDefaultBuffer) + "; 65792 carries weft's 64 KiB over tcp, README") +
         ")";
}

}  // namespace weft::transport
