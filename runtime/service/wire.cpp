#include "wire.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace weft::service {

namespace {

// The body size a type must have; for kStatusReply the smallest (rows follow).
bool knownType(uint16_t t) {
  return t >= static_cast<uint16_t>(MsgType::kHello) && t <= static_cast<uint16_t>(MsgType::kWake);
}

size_t fixedBody(MsgType t) {
  switch (t) {
    case MsgType::kHello:
      return sizeof(Hello);
    case MsgType::kWelcome:
      return sizeof(Welcome);
    case MsgType::kRefused:
      return sizeof(Refused);
    case MsgType::kStatusRequest:
    case MsgType::kDetach:
    case MsgType::kDetached:
    case MsgType::kWake:
      return 0;
    case MsgType::kStatusReply:
      return sizeof(StatusHead);
    case MsgType::kMapMemory:
      return sizeof(MapMemory);
    case MsgType::kMemoryMapped:
      return sizeof(MemoryMapped);
    case MsgType::kAttach:
      return sizeof(Attach);
    case MsgType::kAttached:
      return sizeof(Attached);
  }
  return 0;
}

template <size_t N>
bool terminated(const char (&s)[N]) {
  return memchr(s, '\0', N) != nullptr;
}

template <class T>
bool bodyAs(const Frame& f, MsgType type, T* out, std::string* why) {
  if (f.type != type || f.body.size() != sizeof(T)) {
    *why = "expected message type " + std::to_string(static_cast<int>(type)) + " of " + std::to_string(sizeof(T)) +
           " bytes, got type " + std::to_string(static_cast<int>(f.type)) + " of " + std::to_string(f.body.size());
    return false;
  }
  memcpy(out, f.body.data(), sizeof(T));
  return true;
}

}  // namespace

Frame& Frame::operator=(Frame&& o) noexcept {
  if (this != &o) {
    closeFds();
    type = o.type;
    body = std::move(o.body);
    fds = std::move(o.fds);
    o.fds.clear();
  }
  return *this;
}

Frame::~Frame() { closeFds(); }

void Frame::closeFds() {
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  fds.clear();
}

std::string checkHeader(const Header& h) {
  if (h.magic != kWireMagic) return "not a weftd message (bad magic)";
  if (h.version != kWireVersion)
    return "protocol version " + std::to_string(h.version) + ", this side speaks " + std::to_string(kWireVersion);
  if (!knownType(h.type)) return "unknown message type " + std::to_string(h.type);
  if (h.bodyBytes > kMaxBodyBytes)
    return "body of " + std::to_string(h.bodyBytes) + " bytes is over the limit of " + std::to_string(kMaxBodyBytes);
  const auto t = static_cast<MsgType>(h.type);
  const size_t want = fixedBody(t);
  if (t == MsgType::kStatusReply) {
    if (h.bodyBytes < want || (h.bodyBytes - want) % sizeof(StatusRow) != 0 ||
        (h.bodyBytes - want) / sizeof(StatusRow) > kMaxStatusRows)
      return "status reply of " + std::to_string(h.bodyBytes) + " bytes is no head and whole rows";
  } else if (h.bodyBytes != want) {
    return "message type " + std::to_string(h.type) + " has " + std::to_string(h.bodyBytes) + " body bytes, expected " +
           std::to_string(want);
  }
  if (t == MsgType::kAttached ? (h.fdCount < 2 || h.fdCount > kMaxFds) : h.fdCount != 0)
    return "message type " + std::to_string(h.type) + " declares " + std::to_string(h.fdCount) + " descriptors";
  return "";
}

FrameReader& FrameReader::operator=(FrameReader&& o) noexcept {
  if (this != &o) {
    for (int fd : fds_) ::close(fd);
    header_ = o.header_;
    memcpy(headerBytes_, o.headerBytes_, sizeof headerBytes_);
    body_ = std::move(o.body_);
    fds_ = std::move(o.fds_);
    o.fds_.clear();
    have_ = o.have_;
    bad_ = std::move(o.bad_);
    o.have_ = 0;
  }
  return *this;
}

FrameReader::~FrameReader() {
  for (int fd : fds_) ::close(fd);
}

size_t FrameReader::want() const {
  if (!bad_.empty()) return 0;
  if (have_ < sizeof(Header)) return sizeof(Header) - have_;
  return sizeof(Header) + header_.bodyBytes - have_;
}

void FrameReader::feed(const uint8_t* data, size_t n, std::vector<int>&& fds) {
  for (int fd : fds) fds_.push_back(fd);
  if (!bad_.empty()) return;
  // Descriptors come only with a message's first bytes (the sender passes them with its header).
  if (!fds.empty() && have_ != 0) bad_ = "descriptors arrived in the middle of a message";
  while (n > 0 && bad_.empty() && want() > 0) {
    if (have_ < sizeof(Header)) {
      const size_t take = n < sizeof(Header) - have_ ? n : sizeof(Header) - have_;
      memcpy(headerBytes_ + have_, data, take);
      have_ += take;
      data += take;
      n -= take;
      if (have_ == sizeof(Header)) {
        memcpy(&header_, headerBytes_, sizeof header_);
        bad_ = checkHeader(header_);
        if (bad_.empty()) body_.reserve(header_.bodyBytes);
      }
    } else {
      const size_t take = n < want() ? n : want();
      body_.insert(body_.end(), data, data + take);
      have_ += take;
      data += take;
      n -= take;
    }
  }
}

FrameReader::Result FrameReader::next(Frame* out, std::string* why) {
  if (!bad_.empty()) {
    *why = bad_;
    return Result::kBad;
  }
  if (have_ < sizeof(Header) || have_ != sizeof(Header) + header_.bodyBytes) return Result::kNeedMore;
  if (fds_.size() != header_.fdCount) {
    bad_ = "message declares " + std::to_string(header_.fdCount) + " descriptors, " + std::to_string(fds_.size()) +
           " arrived";
    *why = bad_;
    return Result::kBad;
  }
  out->closeFds();
  out->type = static_cast<MsgType>(header_.type);
  out->body = std::move(body_);
  out->fds = std::move(fds_);
  body_.clear();
  fds_.clear();
  have_ = 0;
  return Result::kFrame;
}

bool decodeHello(const Frame& f, Hello* out, std::string* why) {
  if (!bodyAs(f, MsgType::kHello, out, why)) return false;
  if (out->role != static_cast<uint32_t>(Role::kLibrary) && out->role != static_cast<uint32_t>(Role::kCtl)) {
    *why = "hello: unknown role " + std::to_string(out->role);
    return false;
  }
  if (!terminated(out->version)) {
    *why = "hello: version is not a terminated string";
    return false;
  }
  return true;
}

bool decodeWelcome(const Frame& f, Welcome* out, std::string* why) {
  if (!bodyAs(f, MsgType::kWelcome, out, why)) return false;
  if (!terminated(out->version) || out->pid <= 0) {
    *why = "welcome: malformed";
    return false;
  }
  return true;
}

bool decodeRefused(const Frame& f, Refused* out, std::string* why) {
  if (!bodyAs(f, MsgType::kRefused, out, why)) return false;
  if (!terminated(out->message)) {
    *why = "refusal: message is not a terminated string";
    return false;
  }
  return true;
}

bool decodeAttach(const Frame& f, Attach* out, std::string* why) {
  if (!bodyAs(f, MsgType::kAttach, out, why)) return false;
  constexpr uint64_t kMaxSegmentBytes = uint64_t{1} << 42;  // the heap_bytes setting's bound, and then some
  // The reply carries the heap, the queue, the staging segment and every peer's heap: nranks + 2.
  constexpr int32_t kMaxRanks = kMaxNodeRanks;
  if (out->nranks < 1 || out->nranks > kMaxRanks || out->rank < 0 || out->rank >= out->nranks) {
    *why = "attach: rank " + std::to_string(out->rank) + " of " + std::to_string(out->nranks) +
           " is out of range (at most " + std::to_string(kMaxRanks) + " ranks per node)";
    return false;
  }
  const bool tileOk = out->tileBytes >= 256 && out->tileBytes <= (uint64_t{1} << 26) && out->tileBytes % 256 == 0;
  if (out->heapBytes == 0 || out->heapBytes > kMaxSegmentBytes || out->queueDepth < 2 || out->queueDepth > 65536 ||
      out->workers < 1 || out->workers > 1024 || out->inboxSlots < 1 || out->inboxSlots > 1024 || !tileOk ||
      out->oneShotBytes > (uint64_t{1} << 28) || out->timeoutNs < 1000000 ||
      out->timeoutNs > uint64_t{86400} * 1000000000 || out->stagingBytes > (uint64_t{1} << 36) ||
      out->engineInWeftd > 1 || out->reserved != 0) {
    *why = "attach: a size, depth, worker count, timeout or engine is out of range";
    return false;
  }
  if (out->engineInWeftd && !out->deviceHeaps && out->stagingBytes == 0) {
    *why = "attach: weftd's engine on the CPU backend reads inputs through a staging segment, and none was asked for";
    return false;
  }
  bool gpusOk = out->deviceHeaps <= 1;
  for (int r = 0; r < kMaxNodeRanks; ++r) gpusOk &= (out->gpus[r] != 0) == (out->deviceHeaps == 1 && r < out->nranks);
  if (!gpusOk) {
    *why = "attach: the ranks' GPUs are missing or given past the communicator's ranks";
    return false;
  }
  return true;
}

uint32_t packPciId(const std::string& id) {
  unsigned domain = 0, bus = 0, device = 0;
  char end = 0;
  if (std::sscanf(id.c_str(), "%4x:%2x:%2x%c", &domain, &bus, &device, &end) != 3 || device >= 32) return 0;
  // The top bit marks a location, so that the first slot of the first bus is not "none".
  return 1u << 31 | domain << 13 | bus << 5 | device;
}

std::string unpackPciId(uint32_t packed) {
  char text[16];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x", (packed >> 13) & 0xffff, (packed >> 5) & 0xff, packed & 31);
  return text;
}

bool decodeAttached(const Frame& f, Attached* out, std::string* why) {
  if (!bodyAs(f, MsgType::kAttached, out, why)) return false;
  const size_t staging = out->engineInWeftd == 1 ? 1 : 0;
  if (out->nranks < 1 || out->rank < 0 || out->rank >= out->nranks || out->engineInWeftd > 2 ||
      out->engineWorkers > kMaxEngineWorkers || f.fds.size() != static_cast<size_t>(out->nranks) + 1 + staging) {
    *why = "attached: rank, size and descriptors disagree";
    return false;
  }
  return true;
}

bool decodeStatus(const Frame& f, StatusHead* head, std::vector<StatusRow>* rows, std::string* why) {
  if (f.type != MsgType::kStatusReply || f.body.size() < sizeof(StatusHead)) {
    *why = "expected a status reply";
    return false;
  }
  memcpy(head, f.body.data(), sizeof *head);
  const size_t n = (f.body.size() - sizeof(StatusHead)) / sizeof(StatusRow);
  if (head->rows != n || !terminated(head->version) || !terminated(head->mps) || !terminated(head->dir)) {
    *why = "status reply: malformed";
    return false;
  }
  rows->resize(n);
  if (n) memcpy(rows->data(), f.body.data() + sizeof(StatusHead), n * sizeof(StatusRow));
  return true;
}

bool decodeMapMemory(const Frame& f, MapMemory* out, std::string* why) {
  if (!bodyAs(f, MsgType::kMapMemory, out, why)) return false;
  if (out->bytes == 0 || out->bytes > (uint64_t{1} << 48) || out->base == 0 || out->base + out->bytes < out->base) {
    *why = "map memory: a size of " + std::to_string(out->bytes) + " bytes";
    return false;
  }
  return true;
}

bool decodeMemoryMapped(const Frame& f, MemoryMapped* out, std::string* why) {
  if (!bodyAs(f, MsgType::kMemoryMapped, out, why)) return false;
  if (out->address == 0) {
    *why = "memory mapped: no address";
    return false;
  }
  return true;
}

std::vector<uint8_t> encode(MsgType type, const void* body, size_t bodyBytes, uint32_t fdCount) {
  Header h{kWireMagic, kWireVersion, static_cast<uint16_t>(type), static_cast<uint32_t>(bodyBytes), fdCount};
  std::vector<uint8_t> out(sizeof h + bodyBytes);
  memcpy(out.data(), &h, sizeof h);
  if (bodyBytes) memcpy(out.data() + sizeof h, body, bodyBytes);
  return out;
}

}  // namespace weft::service
