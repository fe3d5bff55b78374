#include "backend.hpp"

#include <cstring>

#include "common/error.hpp"
#include "device/gpu.hpp"

namespace weft::transport {

#if defined(WEFT_HAVE_UCX)
std::unique_ptr<NetBackend> makeUcxBackend();
std::string ucxSummary();
#endif
#if defined(WEFT_HAVE_OFI)
std::unique_ptr<NetBackend> makeOfiBackend();
std::string ofiSummary();
#endif

std::string applyMessage(Region heap, const WireMessage& m, const void* payload, uint64_t payloadBytes) {
  const uint64_t bytes = m.kind == kMsgDeliver ? m.bytes : 8;
  if (m.offset % 8 != 0 || m.offset > heap.bytes || bytes > heap.bytes - m.offset)
    return "a message for heap offset " + std::to_string(m.offset) + " (" + std::to_string(bytes) +
           " bytes) outside the heap or not 8-byte aligned";
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
    default:
      return "a message of unknown kind " + std::to_string(m.kind);
  }
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
