#include "topology.hpp"

#include <hwloc.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "common/process.hpp"

namespace weft {

HostIdentity localHost() {
  HostIdentity h;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  h.hostname = name;
  h.hash = thisHostHash();
  return h;
}

std::string topologySummary() {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return "hwloc: cannot initialise";
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return "hwloc: cannot load the topology";
  }
  auto count = [&](hwloc_obj_type_t t) { return hwloc_get_nbobjs_by_type(topo, t); };
  int gpus = 0, nics = 0;
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_osdev(topo, o));) {
    if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU || o->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC) ++gpus;
    if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS || o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) ++nics;
  }
  std::ostringstream s;
  s << count(HWLOC_OBJ_PACKAGE) << " package(s), " << count(HWLOC_OBJ_NUMANODE) << " NUMA node(s), "
    << count(HWLOC_OBJ_CORE) << " core(s), " << count(HWLOC_OBJ_PU) << " PU(s), " << gpus << " GPU/accelerator(s), "
    << nics << " network device(s)";
  hwloc_topology_destroy(topo);
  return s.str();
}

}  // namespace weft
