#include "build_commit.hpp"

#include "weft/build_commit.h"

namespace weft::tools {

const char* buildCommit() { return WEFT_BUILD_COMMIT; }

}  // namespace weft::tools
