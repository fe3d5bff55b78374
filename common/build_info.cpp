#include "build_info.hpp"

#include "weft/build_commit.h"
#include "weft/version.h"

namespace weft {

const char* buildCommit() { return WEFT_BUILD_COMMIT; }

std::string buildName() {
  const std::string commit = WEFT_BUILD_COMMIT;
  return std::string("weft ") + WEFT_VERSION_STRING + (commit.empty() ? "" : " (commit " + commit + ")");
}

std::string buildIdentity() { return buildName() + ", " + WEFT_BUILD_GPU + " backend"; }

}  // namespace weft
