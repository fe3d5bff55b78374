// What this build of weft is: the commit its sources were at, and the identity the ranks of a job
// compare when they join (runtime/bootstrap_wire.hpp).
#pragma once

#include <string>

namespace weft {

// The commit of the sources as this build compiled them, "-dirty" where tracked files differed
// from it, empty outside a git checkout (cmake/WeftCommit.cmake). The tools name it in what they
// record (weft-bench's JSON rows, `weftctl tune measure`'s table rows).
const char* buildCommit();

// "weft <version>", then " (commit <buildCommit()>)" where it is known: what `weftctl info` prints
// first.
std::string buildName();

// buildName() and the GPU backend: ranks whose builds differ in any of them may lay out memory or
// run an op differently, so they refuse to run together.
std::string buildIdentity();

}  // namespace weft
