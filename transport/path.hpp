// Which data path connects this rank to a peer. Chosen once per peer pair at communicator init.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace weft::transport {

enum class Path { kSelf, kP2p, kProxy };

inline const char* pathName(Path p) { return p == Path::kSelf ? "self" : p == Path::kP2p ? "p2p" : "proxy"; }

// Peers on the same host reach each other's heap by mapping it (p2p) unless the proxy is forced;
// peers on other hosts go through the host proxy.
inline Path choosePath(int me, int peer, uint64_t myHost, uint64_t peerHost, bool forceProxy) {
  if (me == peer) return Path::kSelf;
  if (myHost == peerHost && !forceProxy) return Path::kP2p;
  return Path::kProxy;
}

// Until the proxy transport exists, every peer must be reachable directly.
inline void requireDirectPaths(const std::vector<Path>& paths) {
  for (size_t r = 0; r < paths.size(); ++r)
    if (paths[r] == Path::kProxy)
      throw Error(Code::kNotSupported, "rank " + std::to_string(r) +
                                           " needs the proxy transport (another host, or transport=proxy), which "
                                           "this build does not provide yet");
}

}  // namespace weft::transport
