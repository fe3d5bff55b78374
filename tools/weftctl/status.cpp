// weftctl status: what the node's weftd says of itself (version, pid, uptime, MPS) and of its
// connections (clients, the communicator rank each has attached).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "inspect.hpp"
#include "runtime/service/client.hpp"

namespace weftctl {

int runStatus(const StatusOptions& o) {
  using weft::service::ConnectStatus;
  ConnectStatus st;
  std::string why;
  auto c = weft::service::Client::connect(o.dir, weft::service::Role::kCtl, o.timeoutS, o.trustedUids, &st, &why);
  if (!c) {
    std::fprintf(stderr, "weftctl: %s%s\n", why.c_str(),
                 st == ConnectStatus::kAbsent  ? " (is weftd running on this node?)"
                 : st == ConnectStatus::kStale ? " (weftd has died; start it again)"
                                               : "");
    return 1;
  }
  const weft::service::Client::Status s = c->status();
  const auto& h = s.head;
  if (o.json) {
    std::printf(
        "{\"pid\":%d,\"version\":%s,\"uptime_ns\":%llu,\"dir\":%s,\"mps\":%s,\"clients\":%u,"
        "\"communicators\":%u,\"held_bytes\":%llu,\"connections\":[",
        h.pid, jsonString(h.version).c_str(), static_cast<unsigned long long>(h.uptimeNs), jsonString(h.dir).c_str(),
        jsonString(h.mps).c_str(), h.clients, h.comms, static_cast<unsigned long long>(h.heldBytes));
    for (size_t i = 0; i < s.rows.size(); ++i) {
      const auto& r = s.rows[i];
      std::printf("%s{\"pid\":%d,\"uid\":%u,\"role\":\"%s\",\"comm\":\"%s\",\"rank\":%d,\"nranks\":%d}", i ? "," : "",
                  r.pid, r.uid, r.role == 1 ? "library" : "weftctl", commHex(r.commId).c_str(), r.rank, r.nranks);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("weftd %s, pid %d, up %s, serving %s\n", h.version, h.pid, secondsText(h.uptimeNs).c_str(), h.dir);
  std::printf("MPS: %s\n", h.mps);
  std::printf("clients: %u, communicators: %u, shared memory held: %llu bytes\n", h.clients, h.comms,
              static_cast<unsigned long long>(h.heldBytes));
  // Communicators by id, with the ranks weftd has attached (a rank that is gone is not listed).
  std::map<uint64_t, std::pair<int, std::vector<int>>> comms;
  for (const auto& r : s.rows)
    if (r.rank >= 0) {
      comms[r.commId].first = r.nranks;
      comms[r.commId].second.push_back(r.rank);
    }
  for (auto& [id, c] : comms) {
    std::sort(c.second.begin(), c.second.end());
    std::string ranks;
    for (int r : c.second) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    std::printf("communicator %s: %zu of %d ranks attached (%s)\n", commHex(id).c_str(), c.second.size(), c.first,
                ranks.c_str());
  }
  if (s.rows.empty()) return 0;
  std::printf("  %-8s %-6s %-8s %-18s %-8s %s\n", "pid", "uid", "role", "communicator", "rank", "connected");
  for (const auto& r : s.rows) {
    const std::string rank = r.rank >= 0 ? std::to_string(r.rank) + "/" + std::to_string(r.nranks) : "-";
    std::printf("  %-8d %-6u %-8s %-18s %-8s %s ago\n", r.pid, r.uid, r.role == 1 ? "library" : "weftctl",
                r.rank >= 0 ? commHex(r.commId).c_str() : "-", rank.c_str(), secondsText(r.connectedNs).c_str());
  }
  return 0;
}

}  // namespace weftctl
