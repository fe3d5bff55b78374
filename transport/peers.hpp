// Every way this rank reaches its peers, behind one table: this rank's heap segment, the segments
// of peers on the same node mapped into this process (p2p), and the host proxy for the rest. The
// runtime asks for a peer's base and for the engine's table; it never sees a mechanism.
// The CPU backend's heap is POSIX shared memory (p2p/shm_segment.hpp); so is a GPU backend's in a
// job with proxy peers (it registers the memory with the device); otherwise a GPU backend maps
// its device heap by IPC (p2p/device_heap.hpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/backend.hpp"
#include "p2p/shm_segment.hpp"
#include "path.hpp"
#include "proxy/proxy.hpp"

namespace weft::transport {

class PeerTable {
 public:
  // Collective over `ex`: creates this rank's zero-filled segment of `bytes`, maps every p2p
  // peer's, and starts the proxy when any peer needs it. Throws weft::Error.
  PeerTable(Exchange& ex, const std::vector<Path>& paths, uint64_t bytes, const ProxyOptions& proxy);
  // Over segments mapped already (weftd made them): segments[r] is rank r's; no proxy.
  PeerTable(int rank, std::vector<ShmSegment> segments);
  ~PeerTable();
  PeerTable(const PeerTable&) = delete;
  PeerTable& operator=(const PeerTable&) = delete;

  // Rank r's heap in this process: its segment, or this rank's mirror of it (proxy peers).
  uint8_t* base(int rank) const { return bases_[rank]; }
  // [nranks + 1] for the engine: the bases, then the proxy's device view (or null).
  uint8_t* const* engineBases() const { return bases_.data(); }
  // The proxy, or null where every peer is mapped.
  Proxy* proxy() const { return proxy_.get(); }

 private:
  ShmSegment own_;
  std::vector<ShmSegment> mapped_;
  std::unique_ptr<Proxy> proxy_;
  std::vector<uint8_t*> bases_;
};

}  // namespace weft::transport
