// Which path a fused op took, as its rank's status page shows it: the GPU op suites check that the
// path they forced (or the rules chose) is the one that ran, not only that the output is right.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>

#include "device/queue_device.hpp"
#include "runtime/status_read.hpp"

namespace weft::test {

// The ops of `kind` on this process's page of `rank` (in status directory `dir`), and how many of
// them carry row flag `flag` (status_page.hpp: kRowVendorProduct, kRowPooledFirst).
struct PageRows {
  int all = 0, flagged = 0;
};

inline PageRows rowsOnPage(const std::string& dir, int rank, dev::OpKind kind, uint32_t flag) {
  PageRows out;
  for (const status::Snapshot& page : status::readDirectory(dir).pages) {
    if (page.header.rank != rank || page.header.pid != getpid()) continue;
    for (const auto* rows : {&page.inFlight, &page.history})
      for (const status::OpRow& row : *rows) {
        if (row.kind != static_cast<uint32_t>(kind)) continue;
        ++out.all;
        out.flagged += (row.flags & flag) != 0;
      }
  }
  return out;
}

}  // namespace weft::test
