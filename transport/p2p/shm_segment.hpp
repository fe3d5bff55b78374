// A POSIX shared-memory segment, owner-only (0600). The symmetric heap of the CPU backend is one
// segment per rank, mapped by every rank of the node; the name is unlinked as soon as every local
// peer has mapped it, so a killed job leaves nothing behind in /dev/shm.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace weft::transport {

class ShmSegment {
 public:
  ShmSegment() = default;
  ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  // Creates and maps a zero-filled segment; fails if the name exists. Throws weft::Error.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Maps an existing segment, which must be at least `bytes` long. Throws weft::Error.
  static ShmSegment open(const std::string& name, size_t bytes);
  // Creates and maps a zero-filled segment that has no name (memfd), for passing by descriptor;
  // *fd receives the descriptor (close-on-exec), which stays the caller's. Throws weft::Error.
  static ShmSegment createAnonymous(const std::string& tag, size_t bytes, int* fd);
  // Maps the segment behind `fd` (which stays the caller's); it must be at least `bytes` long.
  // `what` names it in errors. Throws weft::Error.
  static ShmSegment map(int fd, size_t bytes, const std::string& what);
  // A fresh name, unique on this host: "/weft-<pid>-<random>-<tag>".
  static std::string uniqueName(const std::string& tag);

  // A segment's name goes once every local peer has mapped it, but a process that dies before
  // then leaves it behind, full size. Its name says which process made it, so what follows can
  // prove it an orphan and remove it. Both act only on this user's segments and return the names
  // they removed.
  // The segments of processes that have ended (their pid is gone) and that are at least
  // `minAgeS` old: a process of another pid namespace sharing /dev/shm looks gone, and its
  // segment is named only while its job starts.
  static std::vector<std::string> removeOrphans(double minAgeS);
  // The segments of `pid`, a child the caller has reaped (a launcher's rank).
  static std::vector<std::string> removeOf(pid_t pid);

  // Removes the name; existing mappings stay valid. Idempotent.
  void unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

  // Unmaps and unlinks; the object becomes empty.
  void reset();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool linked_ = false;
};

}  // namespace weft::transport
