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
  std::string source;    // the host it was gathered from ("": this one)

  std::string host() const { return header.host; }
  // An in-flight row's state for people: queued, on stream (a GPU's), running (every earlier op had
  // ended, or the GPU's status watch saw it start).
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

// Reads every "*.page" of `dir`. Throws weft::Error if the directory is unsafe (status_page.hpp's rules).
Listing readDirectory(const std::string& dir);
// Reads page `name` of the open directory; false and *why if it is refused. `raw`: also its
// consistent bytes.
bool readPage(int dirFd, const std::string& name, Snapshot* out, std::string* why, std::vector<uint8_t>* raw = nullptr);
// Checks and parses a page's consistent bytes (alive and readNs are left for the caller).
bool parsePage(const std::string& name, const std::vector<uint8_t>& bytes, Snapshot* out, std::string* why);
// Pages carried between hosts (`weftctl pages`, read by `weftctl diagnose --hosts`): each page of
// `dir` as its consistent bytes, with what this host sees of its process. Pages refused here go to
// *refused.
std::string encodePages(const std::string& dir, std::vector<Refusal>* refused);
// What encodePages wrote on host `source`; every page is checked as one read here is, and a
// malformed stream is refused, never trusted.
Listing decodePages(const std::string& stream, const std::string& source);
// Removes the pages of processes that are gone (and pages they left half made); returns their
// names. Only the caller's files: the directory is the caller's, and readPage refuses others.
std::vector<std::string> removeDead(const std::string& dir);

const char* kindName(uint32_t kind);
const char* dtypeName(uint32_t dtype);
const char* statusName(uint32_t status);
const char* pageStateName(uint32_t state);

}  // namespace weft::status
