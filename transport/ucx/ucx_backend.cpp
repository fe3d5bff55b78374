// The proxy's UCX back-end: one worker per rank, one endpoint per proxy peer, the heap mapped
// (ucp_mem_map) with its rkey packed and exchanged over the bootstrap; tiles go by ucp_put_nbx.
// A signal or flagged data goes as an active message, once an endpoint flush started after the
// puts before it has completed (a completed put only frees its source; a flush makes it visible
// at the target). Over UCX's tcp transport puts are active messages too, which the target's
// worker applies as it is progressed: every rank's proxy thread progresses its worker.
// UCX_TLS and the other UCX_* variables are read by ucp_config_read, as UCX users expect.
#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <list>

#include "common/error.hpp"
#include "common/log.hpp"
#include "device/primitives_device.hpp"
#include "transport/net/backend.hpp"
#include "transport/ucx/ucx_tls.hpp"

namespace weft::transport {
namespace {

constexpr uint16_t kAmId = 0x77;

std::string ucsText(ucs_status_t s) { return ucs_status_string(s); }

[[noreturn]] void fail(const std::string& what, ucs_status_t s) {
  throw Error(Code::kTransport, "UCX: " + what + ": " + ucsText(s));
}

class UcxBackend;

// What an endpoint's error callback is told: whose endpoint it was.
struct ErrorArg {
  UcxBackend* backend;
  int peer;
};

// A request UCX still holds, and the message bytes it reads from. Its completion callback files
// it in the back-end's `done_`, so that progress costs nothing per request still in flight.
struct Pending {
  UcxBackend* backend;
  void* request = nullptr;
  std::unique_ptr<uint8_t[]> buffer;
  int peer;
  ucs_status_t status = UCS_OK;
  std::list<Pending>::iterator at;
};

class UcxBackend final : public NetBackend {
 public:
  ~UcxBackend() override;
  const char* name() const override { return "ucx"; }
  std::string describe() const override { return describe_; }
  void open(const std::vector<uint8_t>& viaProxy, Region heap, const std::vector<Region>& mirrors,
            ArrivalOrder* arrivals) override;
  void connect(Exchange& ex) override;
  void put(int peer, uint64_t offset, uint64_t bytes) override;
  void message(int peer, uint32_t kind, uint64_t offset, uint64_t value, uint32_t seq) override;
  void batch(int peer, std::vector<MessagePart> parts, uint32_t seq) override;
  bool progress() override;
  void peerGone(int peer, const std::string& why) override;
  bool copiesWrites() const override;
  uint64_t outstanding() const override { return pending_.size() + (held_ ? held_->held() : 0); }
  std::optional<PeerFault> fault() const override { return fault_; }
  void sayGoodbye() override;

 private:
  struct Peer {
    ucp_ep_h ep = nullptr;
    ucp_rkey_h rkey = nullptr;
    uint64_t base = 0;         // the peer's heap in its address space
    void* flush = nullptr;     // the flush in flight, if any
    uint64_t flushCovers = 0;  // puts issued before it
    uint64_t visible = 0;      // puts known visible at the peer
    bool failed = false;
    bool closed = false;   // it said goodbye
    bool greeted = false;  // its hello arrived (connect)
  };
  void noteFault(int peer, const std::string& what) {
    if (peer >= 0 && peers_[peer].closed) return;
    if (!fault_) fault_ = PeerFault{peer, "UCX: " + what};
  }
  static void onEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void onDone(void* request, ucs_status_t status, void* pending);
  static ucs_status_t onMessage(void* arg, const void* header, size_t headerBytes, void* data, size_t bytes,
                                const ucp_am_recv_param_t* param);
  // Sends a message; a heap message's payload comes from the mirror.
  bool send(int peer, const OrderedMessages::Held& h);
  // Files a request UCX returned (or the error it returned) for `pending`, the last of pending_.
  void track(ucs_status_ptr_t s, const std::string& what);
  bool advanceFlushes();
  void wireUp(int nranks);

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h heapMem_ = nullptr;
  Region heap_;
  std::vector<Region> mirrors_;
  std::vector<uint8_t> viaProxy_;
  std::vector<Peer> peers_;
  std::vector<ErrorArg> errorArgs_;  // [nranks], fixed before any endpoint points into it
  std::list<Pending> pending_;
  std::vector<Pending*> done_;  // completed since the last progress()
  std::unique_ptr<OrderedMessages> held_;
  ArrivalOrder* arrivals_ = nullptr;
  std::optional<PeerFault> fault_;
  bool peerFailureHandling_ = true;
  int me_ = -1;
  std::string describe_;
};

void UcxBackend::onDone(void*, ucs_status_t status, void* pending) {
  auto* p = static_cast<Pending*>(pending);
  p->status = status;
  p->backend->done_.push_back(p);
}

void UcxBackend::onEpError(void* arg, ucp_ep_h, ucs_status_t status) {
  const auto* a = static_cast<const ErrorArg*>(arg);
  UcxBackend* self = a->backend;
  const int peer = a->peer;
  self->peers_[peer].failed = true;
  self->noteFault(peer, "the endpoint to rank " + std::to_string(peer) + " failed: " + ucsText(status));
}

ucs_status_t UcxBackend::onMessage(void* arg, const void* header, size_t headerBytes, void* data, size_t bytes,
                                   const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxBackend*>(arg);
  if (headerBytes != sizeof(WireMessage) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    self->noteFault(-1, "a malformed message arrived (header " + std::to_string(headerBytes) + " bytes)");
    return UCS_OK;
  }
  WireMessage m;
  memcpy(&m, header, sizeof m);
  if (m.kind == kMsgGoodbye || m.kind == kMsgHello) {
    if (m.value < self->peers_.size())
      (m.kind == kMsgGoodbye ? self->peers_[m.value].closed : self->peers_[m.value].greeted) = true;
    return UCS_OK;
  }
  const std::string bad = self->arrivals_->arrive(self->heap_, m, data, bytes);
  if (!bad.empty()) self->noteFault(-1, bad);
  return UCS_OK;
}

// UCX's tcp transport cuts every put and message into segments of UCX_TCP_TX_SEG_SIZE (8 KB by
// default), each a send and a progress step on both sides. weft's puts are whole tiles: with 256 KB
// segments the 1 MiB All-to-All through the proxy took 0.53 ms instead of 1.16 on 2 H200 (NCCL's
// socket path: 0.27), and 1.2 ms instead of 3.2-4.8 on the CPU backend. A value the user set wins.
// UCX 1.13 reads the tcp transport's settings from the environment when it opens the interface
// (ucp_config_modify does not reach them), so the default goes there, before the first UCX context
// of the process: setenv at init, like the other settings UCX reads from the environment. Only
// where UCX_TLS lets UCX use tcp: elsewhere UCX warns of the variables as unused, on every rank.
void widenTcpSegments() {
  if (!ucxTlsMayUseTcp(getenv("UCX_TLS"))) return;
  for (const char* name : {"UCX_TCP_TX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE"})
    if (setenv(name, "256k", /*overwrite=*/0) != 0)
      WEFT_LOG(kWarn, kProxy, "UCX: could not default {} to 256k; its tcp puts go in 8 KB segments", name);
}

void UcxBackend::open(const std::vector<uint8_t>& viaProxy, Region heap, const std::vector<Region>& mirrors,
                      ArrivalOrder* arrivals) {
  heap_ = heap;
  mirrors_ = mirrors;
  viaProxy_ = viaProxy;
  const int n = static_cast<int>(viaProxy.size());
  peers_.resize(n);
  held_ = std::make_unique<OrderedMessages>(n);
  arrivals_ = arrivals;

  widenTcpSegments();
  ucp_config_t* config = nullptr;
  if (const ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK)
    fail("reading its configuration", s);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
  const ucs_status_t initStatus = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (initStatus != UCS_OK) fail("ucp_init", initStatus);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // the init thread, then only the proxy thread
  if (const ucs_status_t s = ucp_worker_create(context_, &wp, &worker_); s != UCS_OK) fail("ucp_worker_create", s);

  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = heap.base;
  mp.length = heap.bytes;
  if (const ucs_status_t s = ucp_mem_map(context_, &mp, &heapMem_); s != UCS_OK) fail("mapping the heap", s);

  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kAmId;
  hp.cb = &UcxBackend::onMessage;
  hp.arg = this;
  if (const ucs_status_t s = ucp_worker_set_am_recv_handler(worker_, &hp); s != UCS_OK)
    fail("setting the message handler", s);
}

void UcxBackend::connect(Exchange& ex) {
  const int n = ex.nranks();
  me_ = ex.rank();
  // The worker address and the rkey, each of its own length: gather the lengths, then every
  // rank's blob padded to the longest.
  ucp_address_t* address = nullptr;
  size_t addressBytes = 0;
  if (const ucs_status_t s = ucp_worker_get_address(worker_, &address, &addressBytes); s != UCS_OK)
    fail("ucp_worker_get_address", s);
  void* rkey = nullptr;
  size_t rkeyBytes = 0;
  if (const ucs_status_t s = ucp_rkey_pack(context_, heapMem_, &rkey, &rkeyBytes); s != UCS_OK) {
    ucp_worker_release_address(worker_, address);
    fail("packing the heap's rkey", s);
  }
  struct Sizes {
    uint64_t address, rkey, base;
  } mine{addressBytes, rkeyBytes, reinterpret_cast<uint64_t>(heap_.base)};
  std::vector<Sizes> sizes(n);
  ex.allGather(&mine, sizeof mine, sizes.data());
  uint64_t blob = 0;
  for (const auto& s : sizes) blob = std::max(blob, s.address + s.rkey);
  std::vector<uint8_t> own(blob), all(blob * n);
  memcpy(own.data(), address, addressBytes);
  memcpy(own.data() + addressBytes, rkey, rkeyBytes);
  ucp_worker_release_address(worker_, address);
  ucp_rkey_buffer_release(rkey);
  ex.allGather(own.data(), blob, all.data());

  errorArgs_.resize(n);
  for (int r = 0; r < n; ++r) {
    if (!viaProxy_[r]) continue;
    errorArgs_[r] = ErrorArg{this, r};
    ucp_ep_params_t ep{};
    ep.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(all.data() + r * blob);
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxBackend::onEpError;
    ep.err_handler.arg = &errorArgs_[r];
    ucs_status_t s = ucp_ep_create(worker_, &ep, &peers_[r].ep);
    if (s == UCS_ERR_UNREACHABLE) {
      // UCX's shared-memory transports have no peer-failure handling: connect without it there;
      // a dead peer is then found by the waits' timeout_s alone.
      ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      s = ucp_ep_create(worker_, &ep, &peers_[r].ep);
      if (s == UCS_OK) peerFailureHandling_ = false;
    }
    if (s != UCS_OK) fail("connecting to rank " + std::to_string(r), s);
    if (const ucs_status_t s =
            ucp_ep_rkey_unpack(peers_[r].ep, all.data() + r * blob + sizes[r].address, &peers_[r].rkey);
        s != UCS_OK)
      fail("unpacking rank " + std::to_string(r) + "'s rkey", s);
    peers_[r].base = sizes[r].base;
  }
  wireUp(n);
  // No rank goes on until every rank's endpoints are up.
  const uint32_t up = 1;
  std::vector<uint32_t> ups(n);
  ex.allGather(&up, sizeof up, ups.data());
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  const char* tls = getenv("UCX_TLS");
  describe_ = "UCX " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release) +
              " (UCX_TLS=" + (tls ? tls : "all") + (peerFailureHandling_ ? "" : "; no peer-failure handling") + ")";
}

// UCX connects an endpoint on its first operation, and UCX 1.13 aborts the process (a fatal error
// in ucp_worker_discard_uct_ep) when the peer dies while the endpoint is still wiring up. So every
// endpoint is wired up here, while every rank is in init: a hello to each proxy peer, then until
// each has sent its own and every request is done (bounded: a peer that never answers fails init).
void UcxBackend::wireUp(int nranks) {
  for (int r = 0; r < nranks; ++r)
    if (viaProxy_[r]) send(r, OrderedMessages::Held{kMsgHello, 0, static_cast<uint64_t>(me_), 0, 0, {}});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(patienceNs_);
  auto ready = [&] {
    if (!pending_.empty()) return false;
    for (int r = 0; r < nranks; ++r)
      if (viaProxy_[r] && !peers_[r].greeted) return false;
    return true;
  };
  while (!ready() && !fault_ && std::chrono::steady_clock::now() < deadline) progress();
  if (fault_) throw Error(Code::kTransport, "connecting to the proxy peers: " + fault_->what);
  for (int r = 0; r < nranks; ++r)
    if (viaProxy_[r] && !peers_[r].greeted)
      throw Error(Code::kTimeout, "connecting to rank " + std::to_string(r) + " through UCX: no answer");
}

UcxBackend::~UcxBackend() {
  // Requests still held are cancelled by closing the endpoints; their buffers go with pending_.
  for (auto& p : peers_) {
    if (p.rkey) ucp_rkey_destroy(p.rkey);
    if (p.flush) ucp_request_free(p.flush);
  }
  for (auto& q : pending_) ucp_request_free(q.request);  // no callback comes after this
  for (auto& p : peers_) {
    if (!p.ep) continue;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_EP_CLOSE_FLAG_FORCE;  // every op was waited for by finalize; a dead peer must not hold us
    ucs_status_ptr_t s = ucp_ep_close_nbx(p.ep, &rp);
    if (UCS_PTR_IS_PTR(s)) {
      for (int i = 0; i < 100000 && ucp_request_check_status(s) == UCS_INPROGRESS; ++i) ucp_worker_progress(worker_);
      ucp_request_free(s);
    }
  }
  pending_.clear();
  if (heapMem_) ucp_mem_unmap(context_, heapMem_);
  if (worker_) ucp_worker_destroy(worker_);
  if (context_) ucp_cleanup(context_);
}

void UcxBackend::put(int peer, uint64_t offset, uint64_t bytes) {
  Peer& p = peers_[peer];
  held_->notePut(peer);
  if (p.failed) return;
  Pending& q = pending_.emplace_back(Pending{this, nullptr, nullptr, peer, UCS_OK, {}});
  q.at = std::prev(pending_.end());
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.send = &UcxBackend::onDone;
  rp.user_data = &q;
  track(ucp_put_nbx(p.ep, mirrors_[peer].base + offset, bytes, p.base + offset, p.rkey, &rp),
        "a put of " + std::to_string(bytes) + " bytes");
}

void UcxBackend::track(ucs_status_ptr_t s, const std::string& what) {
  Pending& q = pending_.back();
  if (UCS_PTR_IS_PTR(s)) {
    q.request = s;
    return;
  }
  const int peer = q.peer;
  pending_.pop_back();  // done at once, or failed
  if (UCS_PTR_IS_ERR(s)) {
    noteFault(peer, what + " to rank " + std::to_string(peer) + " failed: " + ucsText(UCS_PTR_STATUS(s)));
    peers_[peer].failed = true;
  }
}

void UcxBackend::message(int peer, uint32_t kind, uint64_t offset, uint64_t value, uint32_t seq) {
  held_->hold(peer, kind, offset, value, seq);
}

void UcxBackend::batch(int peer, std::vector<MessagePart> parts, uint32_t seq) {
  held_->hold(peer, std::move(parts), seq);
}

// tcp and shared memory copy on both hosts; a site with an RDMA device (UCX_TLS unset, "all", an
// exclusion list, or naming one of its transports) writes by its NIC.
bool UcxBackend::copiesWrites() const {
  switch (ucxTlsRdma(getenv("UCX_TLS"))) {
    case UcxRdma::kNamed:
      return false;
    case UcxRdma::kNone:
      return true;
    case UcxRdma::kIfPresent:
      break;
  }
  std::error_code ec;
  return !std::filesystem::exists("/sys/class/infiniband", ec) ||
         std::filesystem::is_empty("/sys/class/infiniband", ec);
}

void UcxBackend::sayGoodbye() {
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
    if (peers_[r].ep && !peers_[r].failed)
      send(r, OrderedMessages::Held{kMsgGoodbye, 0, static_cast<uint64_t>(me_), 0, 0, {}});
}

bool UcxBackend::send(int peer, const OrderedMessages::Held& h) {
  Peer& p = peers_[peer];
  if (p.failed) return true;  // dropped: the fault is recorded, the op will fail
  const WireMessage m = h.wire(static_cast<uint32_t>(me_));
  // A payload that is one run of the mirror goes from there (UCX copies it or sends it in place):
  // flagged data, one row, and the rows the device packed; rows at a stride and batches are packed
  // behind the header.
  const Rows rows = m.kind == kMsgRows ? rowsOf(m.value) : Rows{};
  const bool inPlace = m.kind == kMsgDeliver || m.kind == kMsgPacked ||
                       (m.kind == kMsgRows && (rows.rows == 1 || rows.stride == rows.rowBytes));
  std::unique_ptr<uint8_t[]> buffer(new uint8_t[sizeof m + (inPlace ? 0 : m.bytes)]);  // every byte is written
  memcpy(buffer.get(), &m, sizeof m);
  const uint8_t* payload = buffer.get() + sizeof m;
  if (m.bytes && inPlace) payload = mirrors_[peer].base + m.offset;
  if (m.bytes && !inPlace) h.pack(mirrors_[peer].base, buffer.get() + sizeof m);
  // The workers rewrite these bytes only after the peer has them (the ops' epochs): a causality
  // through the peer that ThreadSanitizer cannot see, so it is told (primitives_device.hpp).
  if (m.bytes) prim::crossProcessRelease();
  Pending& q = pending_.emplace_back(Pending{this, nullptr, std::move(buffer), peer, UCS_OK, {}});
  q.at = std::prev(pending_.end());
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.flags = UCP_AM_SEND_FLAG_EAGER;
  rp.cb.send = &UcxBackend::onDone;
  rp.user_data = &q;
  track(ucp_am_send_nbx(p.ep, kAmId, q.buffer.get(), sizeof m, payload, m.bytes, &rp), "a message");
  return true;
}

// A flush per peer with held messages: when it completes, the puts issued before it started are
// visible, and the messages held behind them go.
bool UcxBackend::advanceFlushes() {
  bool moved = false;
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r) {
    Peer& p = peers_[r];
    if (p.flush && ucp_request_check_status(p.flush) != UCS_INPROGRESS) {
      const ucs_status_t s = ucp_request_check_status(p.flush);
      ucp_request_free(p.flush);
      p.flush = nullptr;
      if (s != UCS_OK) {
        noteFault(r, "flushing the endpoint to rank " + std::to_string(r) + " failed: " + ucsText(s));
        p.failed = true;
      }
      p.visible = p.flushCovers;
      moved = true;
    }
    if (!held_->holding(r)) continue;
    if (p.failed) {
      held_->drop(r);  // nothing of it will be sent
      moved = true;
      continue;
    }
    moved |= held_->release(r, p.visible, [&](const OrderedMessages::Held& h) { return send(r, h); });
    if (held_->holding(r) && !p.flush && !p.failed) {
      const uint64_t covers = held_->putsIssued(r);
      ucp_request_param_t rp{};
      ucs_status_ptr_t s = ucp_ep_flush_nbx(p.ep, &rp);
      if (UCS_PTR_IS_ERR(s)) {
        noteFault(r, "flushing the endpoint to rank " + std::to_string(r) + " failed: " + ucsText(UCS_PTR_STATUS(s)));
        p.failed = true;
      } else if (s == nullptr) {
        p.visible = covers;  // nothing was outstanding
      } else {
        p.flush = s;
        p.flushCovers = covers;
      }
      moved = true;
    }
  }
  return moved;
}

bool UcxBackend::progress() {
  bool moved = ucp_worker_progress(worker_) != 0;
  for (Pending* q : done_) {
    if (q->status != UCS_OK) {
      noteFault(q->peer, "an operation to rank " + std::to_string(q->peer) + " failed: " + ucsText(q->status));
      peers_[q->peer].failed = true;
    }
    ucp_request_free(q->request);
    pending_.erase(q->at);
    moved = true;
  }
  done_.clear();
  moved |= advanceFlushes();
  return moved;
}

void UcxBackend::peerGone(int peer, const std::string& why) {
  if (peers_[peer].failed) return;
  // A goodbye that came before the end makes it no fault.
  for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) {
  }
  noteFault(peer, why);
  peers_[peer].failed = true;  // what is held for it is dropped by the next progress()
}

}  // namespace

std::unique_ptr<NetBackend> makeUcxBackend() { return std::make_unique<UcxBackend>(); }

std::string ucxSummary() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  const char* tls = getenv("UCX_TLS");
  return "ucx: UCX " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release) +
         ", transports from UCX_TLS=" + (tls ? tls : "(unset: all)") + " (ucx_info -d lists them)";
}

}  // namespace weft::transport
