#include "peers.hpp"

#include <cstdio>

namespace weft::transport {

namespace {
constexpr double kOrphanAgeS = 600;
struct SegmentName {
  char name[96];
};
}  // namespace

PeerTable::PeerTable(Exchange& ex, const std::vector<Path>& paths, uint64_t bytes, const ProxyOptions& proxy) {
  const int n = ex.nranks(), me = ex.rank();
  // What ranks of earlier jobs left when they died during init. A segment's name lives only while
  // its job starts, which takes well under the age asked for unless bootstrap_timeout_s is raised
  // past it and a peer is that late.
  ShmSegment::removeOrphans(kOrphanAgeS);
  // ftruncate zero-fills, control area included.
  own_ = ShmSegment::create(ShmSegment::uniqueName("heap" + std::to_string(me)), bytes);
  SegmentName mine{};
  snprintf(mine.name, sizeof mine.name, "%s", own_.name().c_str());
  std::vector<SegmentName> all(n);
  ex.allGather(&mine, sizeof mine, all.data());
  bases_.assign(n + 1, nullptr);
  std::vector<uint8_t> viaProxy(n, 0);
  for (int r = 0; r < n; ++r) {
    if (paths[r] == Path::kSelf) {
      bases_[r] = static_cast<uint8_t*>(own_.data());
    } else if (paths[r] == Path::kP2p) {
      all[r].name[sizeof all[r].name - 1] = '\0';
      mapped_.push_back(ShmSegment::open(all[r].name, bytes));
      bases_[r] = static_cast<uint8_t*>(mapped_.back().data());
    } else {
      viaProxy[r] = 1;
    }
  }
  bool anyProxy = false;
  for (uint8_t v : viaProxy) anyProxy |= v != 0;
  // Whether any rank needs the proxy: then every rank takes part in its exchanges, so that the
  // collective steps line up (a rank without proxy peers connects to none). This exchange is also
  // the barrier after which every p2p segment is mapped and the names can go.
  const uint32_t mineWants = anyProxy;
  std::vector<uint32_t> wants(n);
  ex.allGather(&mineWants, sizeof mineWants, wants.data());
  own_.unlink();
  bool jobWantsProxy = false;
  for (uint32_t x : wants) jobWantsProxy |= x != 0;
  if (jobWantsProxy) {
    proxy_ = std::make_unique<Proxy>(ex, viaProxy, Region{bases_[me], bytes}, proxy);
    for (int r = 0; r < n; ++r)
      if (viaProxy[r]) bases_[r] = proxy_->mirror(r);
    if (anyProxy) bases_[n] = reinterpret_cast<uint8_t*>(proxy_->view());
  }
}

PeerTable::PeerTable(int rank, std::vector<ShmSegment> segments) {
  bases_.assign(segments.size() + 1, nullptr);
  for (size_t r = 0; r < segments.size(); ++r) {
    bases_[r] = static_cast<uint8_t*>(segments[r].data());
    if (static_cast<int>(r) == rank)
      own_ = std::move(segments[r]);
    else
      mapped_.push_back(std::move(segments[r]));
  }
}

PeerTable::~PeerTable() {
  proxy_.reset();  // the thread stops before the memory it writes goes
}

}  // namespace weft::transport
