#include "backend.hpp"

#include <cstring>

#include "common/error.hpp"
#include "device/gpu.hpp"
#include "device/proxy_device.hpp"

namespace weft::transport {

#if defined(WEFT_HAVE_UCX)
std::unique_ptr<NetBackend> makeUcxBackend();
std::string ucxSummary();
#endif
#if defined(WEFT_HAVE_OFI)
std::unique_ptr<NetBackend> makeOfiBackend();
std::string ofiSummary();
#endif

Rows rowsOf(uint64_t value) { return Rows{value >> 48, (value >> 24) & dev::kRowBytesMax, value & dev::kStrideMax}; }

uint64_t rowsValue(const Rows& r) { return dev::rowsWord(r.rows, r.rowBytes, r.stride); }

uint64_t payloadBytes(uint32_t kind, uint64_t value) {
  if (kind == kMsgDeliver) return value;
  if (kind == kMsgRows) return rowsOf(value).payload();
  return 0;
}

void packPayload(const uint8_t* mirror, uint32_t kind, uint64_t offset, uint64_t value, uint8_t* out) {
  if (kind == kMsgDeliver) {
    memcpy(out, mirror + offset, value);
  } else if (kind == kMsgRows) {
    const Rows r = rowsOf(value);
    for (uint64_t i = 0; i < r.rows; ++i) memcpy(out + i * r.rowBytes, mirror + offset + i * r.stride, r.rowBytes);
  }
}

void OrderedMessages::hold(int peer, uint32_t kind, uint64_t offset, uint64_t value) {
  auto& q = peers_[peer].held;
  const uint64_t before = peers_[peer].putsIssued;
  if (kind == kMsgDeliver) {
    for (uint64_t at = 0; at < value; at += payloadMax_)
      q.push_back(Held{kind, offset + at, std::min(payloadMax_, value - at), before});
  } else if (kind == kMsgRows) {
    // Whole rows per message; the proxy sends no row longer than a message holds.
    const Rows r = rowsOf(value);
    const uint64_t per = std::max<uint64_t>(1, payloadMax_ / std::max<uint64_t>(1, r.rowBytes));
    for (uint64_t at = 0; at < r.rows; at += per)
      q.push_back(Held{kind, offset + at * r.stride, rowsValue(Rows{std::min(per, r.rows - at), r.rowBytes, r.stride}),
                       before});
  } else {
    q.push_back(Held{kind, offset, value, before});
  }
}

std::string applyMessage(Region heap, const WireMessage& m, const void* payload, uint64_t payloadBytes) {
  const Rows rows = m.kind == kMsgRows ? rowsOf(m.value) : Rows{};
  const uint64_t bytes = m.kind == kMsgDeliver ? m.bytes : m.kind == kMsgRows ? rows.span() : 8;
  const uint64_t align = m.kind == kMsgRows ? 1 : 8;
  if (m.offset % align != 0 || m.offset > heap.bytes || bytes > heap.bytes - m.offset)
    return "a message for heap offset " + std::to_string(m.offset) + " (" + std::to_string(bytes) +
           " bytes) outside the heap or not aligned";
  auto* word = reinterpret_cast<uint64_t*>(heap.base + m.offset);
  switch (m.kind) {
    case kMsgSignalStore:
      gpu::atomicStore<gpu::Order::kRelease>(word, m.value);
      return "";
    case kMsgSignalAdd:
      gpu::atomicFetchAdd<gpu::Order::kRelease>(word, m.value);
      return "";
    case kMsgDeliver: {
      if (payloadBytes != m.bytes || m.bytes % 8 != 0)
        return "a flagged-data message of " + std::to_string(payloadBytes) + " bytes that says " +
               std::to_string(m.bytes);
      // Each word whole: a flagged line's reader trusts a word whose flag it sees.
      const auto* src = static_cast<const uint8_t*>(payload);
      for (uint64_t i = 0; i < m.bytes / 8; ++i) {
        uint64_t w;
        memcpy(&w, src + 8 * i, 8);
        gpu::atomicStore<gpu::Order::kRelaxed>(word + i, w);
      }
      return "";
    }
    case kMsgRows: {
      if (payloadBytes != m.bytes || m.bytes != rows.payload() || (rows.rows > 1 && rows.stride < rows.rowBytes))
        return "a rows message of " + std::to_string(payloadBytes) + " bytes that says " + std::to_string(m.bytes) +
               " (" + std::to_string(rows.rows) + " rows of " + std::to_string(rows.rowBytes) + " at stride " +
               std::to_string(rows.stride) + ")";
      // Plain data: its reader acquires the signal this proxy stores after it (release).
      const auto* src = static_cast<const uint8_t*>(payload);
      for (uint64_t i = 0; i < rows.rows; ++i)
        memcpy(heap.base + m.offset + i * rows.stride, src + i * rows.rowBytes, rows.rowBytes);
      return "";
    }
    default:
      return "a message of unknown kind " + std::to_string(m.kind);
  }
}

std::string ArrivalOrder::arrive(Region heap, const WireMessage& m, const void* payload, uint64_t payloadBytes) {
  if (m.from >= next_.size()) return "a message from rank " + std::to_string(m.from) + ", which is not in the job";
  auto& early = early_[m.from];
  if (m.seq != next_[m.from]) {
    // Early (a later message of this sender overtook it): kept until its turn. One from before
    // the expected (a duplicate) is impossible on a reliable transport.
    if (static_cast<int32_t>(m.seq - next_[m.from]) < 0)
      return "message " + std::to_string(m.seq) + " from rank " + std::to_string(m.from) + " arrived twice";
    if (early.size() >= kEarlyMax)
      return "rank " + std::to_string(m.from) + "'s messages arrived more than " + std::to_string(kEarlyMax) +
             " out of order";
    const auto* p = static_cast<const uint8_t*>(payload);
    early.push_back(Early{m, std::vector<uint8_t>(p, p + payloadBytes)});
    return "";
  }
  std::string bad = applyMessage(heap, m, payload, payloadBytes);
  ++next_[m.from];
  // Then every kept one whose turn has come, in order.
  for (bool found = true; found && !early.empty();) {
    found = false;
    for (size_t i = 0; i < early.size(); ++i) {
      if (early[i].m.seq != next_[m.from]) continue;
      Early e = std::move(early[i]);
      early.erase(early.begin() + static_cast<std::ptrdiff_t>(i));
      const std::string b = applyMessage(heap, e.m, e.payload.data(), e.payload.size());
      if (bad.empty()) bad = b;
      ++next_[m.from];
      found = true;
      break;
    }
  }
  return bad;
}

size_t ArrivalOrder::early() const {
  size_t n = 0;
  for (const auto& e : early_) n += e.size();
  return n;
}

std::vector<std::string> backendsBuilt() {
  std::vector<std::string> names;
#if defined(WEFT_HAVE_UCX)
  names.push_back("ucx");
#endif
#if defined(WEFT_HAVE_OFI)
  names.push_back("ofi");
#endif
  return names;
}

std::unique_ptr<NetBackend> makeBackend(const std::string& name) {
#if defined(WEFT_HAVE_UCX)
  if (name == "ucx") return makeUcxBackend();
#endif
#if defined(WEFT_HAVE_OFI)
  if (name == "ofi") return makeOfiBackend();
#endif
  std::string built;
  for (const auto& b : backendsBuilt()) built += (built.empty() ? "" : ", ") + b;
  throw Error(Code::kNotSupported, "proxy_backend: '" + name + "' is not built into this weft (built: " +
                                       (built.empty() ? std::string("none") : built) + ")");
}

std::string backendsSummary() {
  std::string s;
#if defined(WEFT_HAVE_UCX)
  s += ucxSummary() + "\n";
#else
  s += "ucx: not built\n";
#endif
#if defined(WEFT_HAVE_OFI)
  s += ofiSummary();
#else
  s += "libfabric: not built";
#endif
  return s;
}

}  // namespace weft::transport
