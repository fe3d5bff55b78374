// Reading status pages (status_page.hpp), for weftctl. Every read is bounded; a page that is
// foreign, truncated, corrupt, of another version or never consistent is refused with the reason,
// never trusted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "status_page.hpp"

namespace weft::status {

// One page, as a consistent copy.
struct Snapshot {
  std::string name;  // the file's name in the directory
  PageHeader header{};
  std::vector<OpRow> inFlight;         // submitted, not seen to end; by ticket
  std::vector<SlotProgress> progress;  // inFlight[i]'s live words (ticket 0, zeros: none yet)
  std::vector<OpRow> history;          // ended, oldest first
  std::vector<transport::Path> paths;  // to each rank
  bool alive = false;
  std::string liveness;  // "alive", "dead", "dead (pid reused)"
  uint64_t readNs = 0;   // when it was read (CLOCK_MONOTONIC)

  std::string host() const { return header.host; }
  // An in-flight row's state for people: queued, running (every earlier op had ended), on stream.
  std::string rowState(size_t i) const;
};

struct Refusal {
  std::string name;
  std::string why;
};

struct Listing {
  std::string dir;
  bool missing = false;         // the directory does not exist (no communicator has made a page yet)
  std::vector<Snapshot> pages;  // by communicator, then rank
  std::vector<Refusal> refused;
};

// Reads every "*.page" of `dir`. Throws weft::Error if the directory is unsafe (status.hpp's rules).
Listing readDirectory(const std::string& dir);
// Reads page `name` of the open directory; false and *why if it is refused.
bool readPage(int dirFd, const std::string& name, Snapshot* out, std::string* why);
// Removes the pages of processes that are gone (and pages they left half made); returns their
// names. Only the caller's files: the directory is the caller's, and readPage refuses others.
std::vector<std::string> removeDead(const std::string& dir);

const char* kindName(uint32_t kind);
const char* dtypeName(uint32_t dtype);
const char* statusName(uint32_t status);
const char* pageStateName(uint32_t state);

}  // namespace weft::status
