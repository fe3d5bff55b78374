// Where weftd lives on a node: its runtime directory (service_dir; by default the status
// directory, /dev/shm/weft-<uid>), with the socket clients connect to and the lock that keeps one
// weftd per directory.
#pragma once

#include <string>

#include "runtime/config.hpp"

namespace weft::service {

std::string directory(const Settings& s);
inline std::string socketPath(const std::string& dir) { return dir + "/weftd.sock"; }
inline std::string lockPath(const std::string& dir) { return dir + "/weftd.lock"; }

}  // namespace weft::service
