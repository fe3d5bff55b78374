// Processes of this host as other processes can check them: a pid alone names a process only
// until it exits and the pid is reused, and only within one pid namespace.
#pragma once

#include <cstdint>

namespace weft {

struct ProcessIdentity {
  int32_t pid = 0;
  uint64_t start = 0;         // clock ticks since boot when it started (/proc/<pid>/stat), 0 unknown
  uint64_t pidNamespace = 0;  // the inode of its pid namespace, 0 unknown
};

// This process.
ProcessIdentity thisProcess();

// The start time of process `pid` in clock ticks since boot, or 0 if unknown.
uint64_t processStart(int pid);

// Whether `p`, a process of this pid namespace, has ended: its pid is gone, is a zombie (killed
// and not yet reaped by its parent) or now names a process that started later.
bool processEnded(const ProcessIdentity& p);

// hostname + boot id, hashed: equal exactly when two processes share a kernel.
uint64_t thisHostHash();

}  // namespace weft
