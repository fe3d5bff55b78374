// Which data path connects this rank to a peer. Chosen once per peer pair at communicator init.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace weft::transport {

enum class Path { kSelf, kP2p, kProxy };

inline const char* pathName(Path p) { return p == Path::kSelf ? "self" : p == Path::kP2p ? "p2p" : "proxy"; }

// The node a rank is on: its host, and with node_ranks > 0 its block of that many ranks, so that
// one host can stand for several nodes (how the inter-node path is tested on one machine).
struct Node {
  uint64_t host;
  int64_t block;
  bool operator==(const Node& o) const { return host == o.host && block == o.block; }
};
inline Node nodeOf(uint64_t hostHash, int rank, int nodeRanks) {
  return Node{hostHash, nodeRanks > 0 ? rank / nodeRanks : 0};
}

// Peers on the same node reach each other's heap by mapping it (p2p) unless the proxy is forced;
// peers on other nodes go through the host proxy.
inline Path choosePath(int me, int peer, Node myNode, Node peerNode, bool forceProxy) {
  if (me == peer) return Path::kSelf;
  if (myNode == peerNode && !forceProxy) return Path::kP2p;
  return Path::kProxy;
}

}  // namespace weft::transport
