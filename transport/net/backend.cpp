#include "backend.hpp"

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "device/primitives_device.hpp"
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
  if (kind == kMsgRows || kind == kMsgPacked) return rowsOf(value).payload();
  return 0;
}

void packPayload(const uint8_t* mirror, uint32_t kind, uint64_t offset, uint64_t value, uint8_t* out) {
  if (kind == kMsgDeliver) {
    memcpy(out, mirror + offset, value);
  } else if (kind == kMsgRows) {
    const Rows r = rowsOf(value);
    for (uint64_t i = 0; i < r.rows; ++i) memcpy(out + i * r.rowBytes, mirror + offset + i * r.stride, r.rowBytes);
  } else if (kind == kMsgPacked) {
    memcpy(out, mirror + offset, rowsOf(value).payload());
  }
}

uint64_t batchBytes(const std::vector<MessagePart>& parts) {
  uint64_t bytes = 0;
  for (const MessagePart& p : parts) bytes += sizeof(WirePart) + payloadBytes(p.kind, p.value);
  return bytes;
}

void packBatch(const uint8_t* mirror, const std::vector<MessagePart>& parts, uint8_t* out) {
  for (const MessagePart& p : parts) {
    const uint64_t bytes = payloadBytes(p.kind, p.value);
    const WirePart w{p.kind, static_cast<uint32_t>(bytes), p.offset, p.kind == kMsgDeliver ? 0 : p.value};
    memcpy(out, &w, sizeof w);
    packPayload(mirror, p.kind, p.offset, p.value, out + sizeof w);
    out += sizeof w + bytes;
  }
}

void OrderedMessages::Held::pack(const uint8_t* mirror, uint8_t* out) const {
  if (kind == kMsgBatch)
    packBatch(mirror, parts, out);
  else
    packPayload(mirror, kind, offset, value, out);
}

WireMessage OrderedMessages::Held::wire(uint32_t from) const {
  // Flagged data says its length in `bytes` alone; a goodbye's value is the sender's rank.
  return WireMessage{kind, static_cast<uint32_t>(payload()), from, seq, offset, kind == kMsgDeliver ? 0 : value};
}

std::string applyMessage(Region heap, const WireMessage& m, const void* payload, uint64_t payloadBytes) {
  const bool rowsKind = m.kind == kMsgRows || m.kind == kMsgPacked;
  const Rows rows = rowsKind ? rowsOf(m.value) : Rows{};
  const uint64_t bytes = m.kind == kMsgDeliver ? m.bytes : rowsKind ? rows.span() : 8;
  const uint64_t align = rowsKind ? 1 : 8;
  if (m.offset % align != 0 || m.offset > heap.bytes || bytes > heap.bytes - m.offset)
    return "a message for heap offset " + std::to_string(m.offset) + " (" + std::to_string(bytes) +
           " bytes) outside the heap or not aligned";
  auto* word = reinterpret_cast<uint64_t*>(heap.base + m.offset);
  switch (m.kind) {
    case kMsgSignalStore:
      prim::atomicStore<prim::Order::kRelease>(word, m.value);
      return "";
    case kMsgSignalAdd:
      prim::atomicFetchAdd<prim::Order::kRelease>(word, m.value);
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
        prim::atomicStore<prim::Order::kRelaxed>(word + i, w);
      }
      return "";
    }
    case kMsgRows:
    case kMsgPacked: {
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

namespace {
bool isSignal(uint32_t kind) { return kind == kMsgSignalStore || kind == kMsgSignalAdd; }

// A part of a batch as it arrived.
struct ArrivedPart {
  WireMessage m;
  const uint8_t* payload;
};

// Splits a batch's payload into its parts. Returns an error text for a malformed one.
std::string splitBatch(const WireMessage& m, const void* payload, uint64_t bytes, std::vector<ArrivedPart>& parts) {
  const auto* p = static_cast<const uint8_t*>(payload);
  uint64_t at = 0;
  for (uint64_t i = 0; i < m.value; ++i) {
    WirePart w{};
    if (bytes - at < sizeof w) break;
    memcpy(&w, p + at, sizeof w);
    at += sizeof w;
    if (w.kind == kMsgBatch || !writesHeap(w.kind) || w.bytes > bytes - at || (isSignal(w.kind) && w.bytes != 0)) break;
    parts.push_back(ArrivedPart{WireMessage{w.kind, w.bytes, m.from, m.seq, w.offset, w.value}, p + at});
    at += w.bytes;
  }
  if (m.value == 0 || parts.size() != m.value || at != bytes || bytes != m.bytes)
    return "a malformed batch message from rank " + std::to_string(m.from) + " (" + std::to_string(m.value) +
           " parts said, " + std::to_string(parts.size()) + " read from " + std::to_string(bytes) + " bytes)";
  return "";
}
}  // namespace

std::string ArrivalOrder::arrive(Region heap, const WireMessage& m, const void* payload, uint64_t payloadBytes) {
  if (m.from >= senders_.size()) return "a message from rank " + std::to_string(m.from) + ", which is not in the job";
  // A batch's signals wait for their turn; its data, like a lone message's, goes at once. A batch
  // whose framing is malformed is applied not at all and counts as data that failed: its place is
  // taken, and the fault reported. A part refused on its own (outside the heap) is reported, and
  // the others go, as lone messages would. A lone message allocates nothing here.
  std::vector<ArrivedPart> parts;
  std::vector<WireMessage> batchSignals;
  std::string bad;
  if (m.kind == kMsgBatch) {
    bad = splitBatch(m, payload, payloadBytes, parts);
    if (bad.empty())
      for (const ArrivedPart& p : parts)
        if (isSignal(p.m.kind)) batchSignals.push_back(p.m);
    if (!bad.empty()) parts.clear();
  } else if (isSignal(m.kind) && (payloadBytes != 0 || m.bytes != 0)) {
    // As a batch's signal part: one that carries bytes is no signal weft sent. It is applied not
    // at all and counts as data that failed.
    bad = "a signal message that carries " + std::to_string(payloadBytes) + " bytes (its header says " +
          std::to_string(m.bytes) + ")";
  }
  const bool batch = m.kind == kMsgBatch;
  const bool malformed = !bad.empty();
  const bool data = batch ? parts.size() > batchSignals.size() || malformed : !isSignal(m.kind) || malformed;
  const bool signals = batch ? !batchSignals.empty() : isSignal(m.kind) && !malformed;
  auto applySignals = [&](std::string b) {
    if (!batch) return signals ? applyMessage(heap, m, nullptr, 0) : b;
    for (const WireMessage& sig : batchSignals)
      if (std::string e = applyMessage(heap, sig, nullptr, 0); b.empty()) b = std::move(e);
    return b;
  };
  auto held = [&] { return batch ? std::move(batchSignals) : std::vector<WireMessage>{m}; };
  Sender& s = senders_[m.from];
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto ahead = static_cast<int32_t>(m.seq - s.next);
    // One from before the first missing one, or seen already, is impossible on a reliable
    // transport; one further ahead than the window is a sender gone wrong.
    if (ahead >= 0 && static_cast<uint32_t>(ahead) >= kEarlyMax)
      return "rank " + std::to_string(m.from) + "'s messages arrived more than " + std::to_string(kEarlyMax) +
             " out of order";
    if (ahead < 0 || (ahead > 0 && !s.ahead.empty() && s.ahead[m.seq % kEarlyMax] != kMissing))
      return "message " + std::to_string(m.seq) + " from rank " + std::to_string(m.from) + " arrived twice";
    if (!data) {
      if (ahead == 0) return advance(heap, s, applySignals(""));
      if (s.ahead.empty()) s.ahead.assign(kEarlyMax, kMissing);
      s.ahead[m.seq % kEarlyMax] = kHeldSignal;
      s.signals.emplace(m.seq, held());
      return "";
    }
  }
  // Data: copied without the lock, so that lanes apply theirs side by side.
  if (malformed) {
    // Nothing of it is applied; the text says why.
  } else if (m.kind != kMsgBatch) {
    bad = applyMessage(heap, m, payload, payloadBytes);
  } else {
    for (const ArrivedPart& p : parts)
      if (!isSignal(p.m.kind))
        if (std::string e = applyMessage(heap, p.m, p.payload, p.m.bytes); bad.empty()) bad = std::move(e);
  }
  // The copy is done before the mark that lets a later signal go (the signal's store releases it).
  std::lock_guard<std::mutex> lock(mutex_);
  if (m.seq == s.next) return advance(heap, s, applySignals(std::move(bad)));
  if (s.ahead.empty()) s.ahead.assign(kEarlyMax, kMissing);
  if (signals) {
    s.ahead[m.seq % kEarlyMax] = kHeldSignal;
    s.signals.emplace(m.seq, held());
  } else {
    s.ahead[m.seq % kEarlyMax] = kApplied;
    ++s.appliedAhead;
  }
  return bad;
}

std::string ArrivalOrder::advance(Region heap, Sender& s, std::string bad) {
  ++s.next;
  while (!s.ahead.empty()) {
    uint8_t& state = s.ahead[s.next % kEarlyMax];
    if (state == kApplied) {
      --s.appliedAhead;
    } else if (state == kHeldSignal) {
      const auto it = s.signals.find(s.next);
      for (const WireMessage& sig : it->second)
        if (std::string b = applyMessage(heap, sig, nullptr, 0); bad.empty()) bad = std::move(b);
      s.signals.erase(it);
    } else {
      break;
    }
    state = kMissing;
    ++s.next;
  }
  return bad;
}

size_t ArrivalOrder::early() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const auto& s : senders_) n += s.signals.size() + s.appliedAhead;
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
