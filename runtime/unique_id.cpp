#include "unique_id.hpp"

#include <sys/random.h>

#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "common/error.hpp"

namespace weft {

namespace {

constexpr uint32_t kIdMagic = 0x74666577;  // "weft"
constexpr uint16_t kIdVersion = 1;

// Layout of the 128 bytes.
struct IdWire {
  uint32_t magic;
  uint16_t version;
  uint16_t family;
  uint16_t port;  // host order
  uint8_t pad[6];
  uint8_t addr[16];
  uint8_t secret[kSecretBytes];
  uint8_t reserved[64];
};
static_assert(sizeof(IdWire) == kUniqueIdBytes);

std::mutex gMutex;
// The listeners of ids not yet taken by a rank 0, oldest first.
std::vector<std::pair<Secret, int>>& listeners() {
  static std::vector<std::pair<Secret, int>> kept;
  return kept;
}

}  // namespace

void UniqueId::encode(uint8_t out[kUniqueIdBytes]) const {
  IdWire w{};
  w.magic = kIdMagic;
  w.version = kIdVersion;
  w.family = static_cast<uint16_t>(root.family());
  w.port = static_cast<uint16_t>(root.port());
  if (root.family() == AF_INET)
    memcpy(w.addr, &reinterpret_cast<const sockaddr_in*>(&root.storage)->sin_addr, 4);
  else
    memcpy(w.addr, &reinterpret_cast<const sockaddr_in6*>(&root.storage)->sin6_addr, 16);
  memcpy(w.secret, secret.data(), kSecretBytes);
  memcpy(out, &w, sizeof w);
}

UniqueId UniqueId::decode(const uint8_t in[kUniqueIdBytes], const std::string& what) {
  IdWire w;
  memcpy(&w, in, sizeof w);
  if (w.magic != kIdMagic || w.version != kIdVersion || (w.family != AF_INET && w.family != AF_INET6) || w.port == 0)
    throw Error(Code::kInvalidArgument, what + ": not a unique id from weft_get_unique_id");
  UniqueId id;
  if (w.family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&id.root.storage);
    a->sin_family = AF_INET;
    memcpy(&a->sin_addr, w.addr, 4);
    id.root.len = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&id.root.storage);
    a->sin6_family = AF_INET6;
    memcpy(&a->sin6_addr, w.addr, 16);
    id.root.len = sizeof(sockaddr_in6);
  }
  id.root.setPort(w.port);
  memcpy(id.secret.data(), w.secret, kSecretBytes);
  return id;
}

Secret randomSecret() {
  Secret s;
  size_t got = 0;
  while (got < s.size()) {
    ssize_t n = getrandom(s.data() + got, s.size() - got, 0);
    if (n < 0) throwSystemError("getrandom");
    got += static_cast<size_t>(n);
  }
  return s;
}

Secret secretFromText(const std::string& text) {
  // Four independent FNV-1a lanes; this guards against joining the wrong job, not against an
  // attacker (who should be kept out by WEFT_BOOTSTRAP_SECRET or the network).
  Secret s{};
  for (int lane = 0; lane < 4; ++lane) {
    uint64_t h = 1469598103934665603ull ^ (0x9e3779b97f4a7c15ull * (lane + 1));
    for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
    memcpy(s.data() + lane * 8, &h, 8);
  }
  return s;
}

bool secretsEqual(const Secret& a, const Secret& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

UniqueId createUniqueId(const std::string& addr, const std::string& ifname) {
  UniqueId id;
  net::SockAddr bindAt = net::advertiseAddress(addr, ifname);
  net::Socket listener = net::Socket::listenOn(bindAt);
  id.root = bindAt;
  id.root.setPort(listener.localAddress().port());
  id.secret = randomSecret();
  std::lock_guard<std::mutex> lock(gMutex);
  auto& kept = listeners();
  if (kept.size() >= kMaxKeptListeners) {
    // An id whose listener is closed still works: its rank 0 binds the same port again at init.
    net::Socket oldest(kept.front().second);
    kept.erase(kept.begin());
  }
  kept.emplace_back(id.secret, listener.release());
  return id;
}

net::Socket takeListener(const UniqueId& id) {
  std::lock_guard<std::mutex> lock(gMutex);
  auto& kept = listeners();
  for (auto it = kept.begin(); it != kept.end(); ++it)
    if (secretsEqual(it->first, id.secret)) {
      net::Socket s(it->second);
      kept.erase(it);
      return s;
    }
  return net::Socket();
}

}  // namespace weft
