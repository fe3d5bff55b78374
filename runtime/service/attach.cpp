#include "attach.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "paths.hpp"

namespace weft::service {

std::unique_ptr<Client> findDaemon(const Settings& s, std::string* why) {
  if (s.getString("service") == "off") return nullptr;
  ConnectStatus st;
  const std::string dir = directory(s);

  try {
    return Client::connect(dir, Role::kLibrary, s.getDouble("bootstrap_timeout_s"),
                           parseIdList("service_trust_uids", s.getString("service_trust_uids")), &st, why);
  } catch (const Error& e) {
    // A weftd that refuses this process (another user's), or answers nonsense: `decide` says so
    // (service=on) or runs the communicator embedded (auto).
    *why = e.what();
    return nullptr;
  }
}

std::string separateNodes(const Settings& s) {
  if (s.getString("transport") == "proxy") return "transport=proxy (weftd maps every peer)";
  if (s.getInt("node_ranks") != 0) return "node_ranks is set (weftd serves one node)";
  return "";
}

bool decide(const Settings& s, const std::vector<RankFinding>& all, int me, const std::string& whyMine) {
  const std::string& mode = s.getString("service");
  if (mode == "off") return false;
  std::string why = all[me].instance == 0 ? whyMine : "";
  for (size_t r = 0; r < all.size() && why.empty(); ++r) {
    if (all[r].instance == 0)
      why = static_cast<int>(r) == me ? whyMine : "rank " + std::to_string(r) + " found no weftd";
    else if (all[r].instance != all[0].instance || all[r].hostHash != all[0].hostHash)
      why = "ranks 0 and " + std::to_string(r) +
            " are on different hosts or served by different weftds "
            "(weftd serves the ranks of one node)";
  }
  if (why.empty()) why = separateNodes(s);
  if (why.empty()) return true;
  if (mode == "on") throw Error(Code::kInvalidUsage, "service=on, but the communicator cannot use weftd: " + why);
  WEFT_LOG(kInfo, kService, "service=auto: running embedded ({})", why);
  return false;
}

}  // namespace weft::service
