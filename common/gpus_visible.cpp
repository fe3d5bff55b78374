#include "common/gpus_visible.hpp"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace weft {

int nvidiaGpusVisible() {
  int n = 0;
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d)) {
      const char* name = e->d_name;
      if (std::strncmp(name, "nvidia", 6) == 0 && name[6] >= '0' && name[6] <= '9') ++n;
    }
    closedir(d);
  }
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && n > 0) {
    // CUDA stops at the first entry that names no device ("-1", an empty one).
    int listed = 0;
    for (const char* c = visible; *c && *c != ',' && *c != '-';) {
      ++listed;
      while (*c && *c != ',') ++c;
      if (*c == ',') ++c;
    }
    n = std::min(n, listed);
  }
  return n;
}

int ranksPerGpu(int nranks, int gpus) { return gpus > 0 ? std::max(1, (nranks + gpus - 1) / gpus) : 1; }

int mpsSharePercent(int nranks, int gpus) {
  const int sharers = ranksPerGpu(nranks, gpus);
  return sharers > 1 ? 100 / sharers : 0;
}

}  // namespace weft
