#include "shm_segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <random>

#include "common/error.hpp"
#include "common/log.hpp"

namespace weft::transport {

namespace {

// Closes the descriptor on every path; the mapping keeps the memory alive.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void* mapShared(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throwSystemError("mmap of shared memory " + name);
  return p;
}

}  // namespace

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    size_ = o.size_;
    name_ = std::move(o.name_);
    linked_ = o.linked_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.linked_ = false;
  }
  return *this;
}

ShmSegment::~ShmSegment() { reset(); }

void ShmSegment::reset() {
  if (data_) ::munmap(data_, size_);
  unlink();
  data_ = nullptr;
  size_ = 0;
}

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  Fd f{::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, S_IRUSR | S_IWUSR)};
  if (f.fd < 0) throwSystemError("shm_open(create) " + name);
  ShmSegment s;
  s.name_ = name;
  s.linked_ = true;
  if (::ftruncate(f.fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    throw Error(
        Code::kOutOfMemory,
        systemErrorMessage("ftruncate of shared memory " + name + " to " + std::to_string(bytes) + " bytes", err));
  }
  s.data_ = mapShared(f.fd, bytes, name);
  s.size_ = bytes;
  WEFT_LOG(kDebug, kP2p, "created {} ({} bytes)", name, bytes);
  return s;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  Fd f{::shm_open(name.c_str(), O_RDWR, 0)};
  if (f.fd < 0) throwSystemError("shm_open " + name);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throwSystemError("fstat " + name);
  if (static_cast<size_t>(st.st_size) < bytes)
    throw Error(Code::kInternal, "shared memory " + name + " is " + std::to_string(st.st_size) + " bytes, expected " +
                                     std::to_string(bytes));
  ShmSegment s;
  s.name_ = name;
  s.data_ = mapShared(f.fd, bytes, name);
  s.size_ = bytes;
  WEFT_LOG(kDebug, kP2p, "mapped {} ({} bytes)", name, bytes);
  return s;
}

ShmSegment ShmSegment::createAnonymous(const std::string& tag, size_t bytes, int* fd) {
  const std::string name = "weft-" + tag;
  Fd f{static_cast<int>(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING))};
  if (f.fd < 0) throwSystemError("memfd_create " + name);
  if (::ftruncate(f.fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    throw Error(Code::kOutOfMemory,
                systemErrorMessage("ftruncate of " + name + " to " + std::to_string(bytes) + " bytes", err));
  }
  // The descriptor goes to other processes: sealed, none of them can shrink the memory under the
  // others' mappings (a later access there would be SIGBUS in every process that maps it).
  if (::fcntl(f.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    throwSystemError("sealing " + name + "'s size");
  ShmSegment s;
  s.data_ = mapShared(f.fd, bytes, name);
  s.size_ = bytes;
  s.name_ = name;
  *fd = f.fd;
  f.fd = -1;
  return s;
}

ShmSegment ShmSegment::map(int fd, size_t bytes, const std::string& what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throwSystemError("fstat " + what);
  // The descriptor came from another process: only shared memory of the size agreed is mapped.
  if (!S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) < bytes)
    throw Error(Code::kTransport, what + ": not shared memory of " + std::to_string(bytes) + " bytes");
  ShmSegment s;
  s.data_ = mapShared(fd, bytes, what);
  s.size_ = bytes;
  s.name_ = what;
  return s;
}

std::string ShmSegment::uniqueName(const std::string& tag) {
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) | rd();
  char buf[96];
  snprintf(buf, sizeof buf, "/weft-%d-%016llx-%s", static_cast<int>(getpid()), static_cast<unsigned long long>(r),
           tag.c_str());
  return buf;
}

namespace {

// Removes this user's weft segments whose maker `orphaned(pid, ageS)` says is gone.
template <class Orphaned>
std::vector<std::string> removeWhere(Orphaned&& orphaned) {
  std::vector<std::string> removed;
  DIR* dir = opendir("/dev/shm");
  if (!dir) return removed;
  const time_t now = time(nullptr);
  while (const dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind("weft-", 0) != 0) continue;
    char* end = nullptr;
    const long pid = strtol(name.c_str() + 5, &end, 10);
    if (pid <= 0 || *end != '-') continue;
    struct stat st {};
    if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
      continue;
    if (!orphaned(static_cast<pid_t>(pid), difftime(now, st.st_mtime))) continue;
    if (::shm_unlink(("/" + name).c_str()) == 0) removed.push_back("/" + name);
  }
  closedir(dir);
  for (const auto& n : removed) WEFT_LOG(kInfo, kP2p, "removed {}, left by a process that has ended", n);
  return removed;
}

}  // namespace

std::vector<std::string> ShmSegment::removeOrphans(double minAgeS) {
  return removeWhere([&](pid_t pid, double ageS) { return ageS >= minAgeS && kill(pid, 0) != 0 && errno == ESRCH; });
}

std::vector<std::string> ShmSegment::removeOf(pid_t pid) {
  return removeWhere([&](pid_t maker, double) { return maker == pid; });
}

void ShmSegment::unlink() {
  if (!linked_) return;
  ::shm_unlink(name_.c_str());
  linked_ = false;
}

}  // namespace weft::transport
