// The commit the tools name in what they record (weft-bench's JSON rows, `weftctl tune
// measure`'s table rows): the sources' as this build compiled them, "-dirty" where tracked files
// differed from it, empty outside a git checkout (cmake/WeftCommit.cmake).
#pragma once

namespace weft::tools {

const char* buildCommit();

}  // namespace weft::tools
