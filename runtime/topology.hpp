// What this host is: its identity (to group ranks by node) and an hwloc summary for weftctl.
#pragma once

#include <cstdint>
#include <string>

namespace weft {

struct HostIdentity {
  std::string hostname;
  uint64_t hash = 0;  // hostname + boot id: equal exactly when two ranks share a kernel
};

HostIdentity localHost();

// One paragraph: packages, NUMA nodes, cores, PUs, GPUs and NICs hwloc sees.
std::string topologySummary();

}  // namespace weft
