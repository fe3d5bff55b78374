// The `service` setting at communicator init (auto | on | off), in two halves around the ranks'
// exchange: each rank looks for its node's weftd, then every rank decides alike from what all
// found. Service mode needs every rank on one host, served by the same weftd, and mapped peers
// (no host proxy); `auto` runs embedded otherwise, `on` fails naming why.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client.hpp"
#include "runtime/config.hpp"

namespace weft::service {

// A connection to the weftd of service_dir, or null: service=off, or none answers or one refuses
// this process (*why says).
std::unique_ptr<Client> findDaemon(const Settings& s, std::string* why);

struct RankFinding {
  uint64_t instance;  // Welcome::instance of the weftd found; 0: none
  uint64_t hostHash;
};

// Why the settings make the ranks separate nodes, which one weftd cannot serve (transport=proxy,
// node_ranks set), or "" where they do not.
std::string separateNodes(const Settings& s);

// Whether the communicator runs in service mode; the same answer on every rank. Throws
// kInvalidUsage for service=on where it cannot (`whyMine`: why this rank found no weftd).
bool decide(const Settings& s, const std::vector<RankFinding>& all, int me, const std::string& whyMine);

}  // namespace weft::service
