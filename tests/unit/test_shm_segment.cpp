// Shared memory that a dying process leaves behind is found by its name and removed, and only
// that: a live process's segments and other names stay.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "transport/p2p/shm_segment.hpp"

namespace weft::transport {
namespace {

bool exists(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

// A child that makes a segment and dies without unlinking it (as a rank killed during init does).
// Returns its pid (reaped) and the segment's name.
std::pair<pid_t, std::string> orphanOfAChild() {
  const std::string name = ShmSegment::uniqueName("orphan-test");
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    ShmSegment s = ShmSegment::create(ShmSegment::uniqueName("heap0"), 4096);
    const std::string made = s.name();
    (void)!write(fds[1], made.c_str(), made.size());
    _exit(0);  // no destructor: the name stays
  }
  close(fds[1]);
  char buf[128] = {};
  const ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return {pid, n > 0 ? std::string(buf, static_cast<size_t>(n)) : name};
}

TEST(ShmSegment, TheSegmentsOfAReapedChildAreRemoved) {
  const auto [pid, name] = orphanOfAChild();
  ASSERT_TRUE(exists(name)) << name;
  ShmSegment mine = ShmSegment::create(ShmSegment::uniqueName("live"), 4096);
  const auto removed = ShmSegment::removeOf(pid);
  EXPECT_FALSE(exists(name));
  EXPECT_NE(std::find(removed.begin(), removed.end(), name), removed.end());
  EXPECT_TRUE(exists(mine.name()));
}

TEST(ShmSegment, OrphansOfEndedProcessesAreRemovedOnceOldEnough) {
  const auto [pid, name] = orphanOfAChild();
  ASSERT_TRUE(exists(name)) << name;
  ShmSegment mine = ShmSegment::create(ShmSegment::uniqueName("live"), 4096);
  ShmSegment::removeOrphans(3600);  // younger than that: kept
  EXPECT_TRUE(exists(name));
  // Aged past the bound, so that the sweep takes only this orphan and older ones, never a segment
  // a job in another pid namespace is starting with.
  const timespec old[2] = {{time(nullptr) - 7200, 0}, {time(nullptr) - 7200, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, ("/dev/shm" + name).c_str(), old, 0), 0);
  const auto removed = ShmSegment::removeOrphans(3600);
  EXPECT_FALSE(exists(name));
  EXPECT_NE(std::find(removed.begin(), removed.end(), name), removed.end());
  EXPECT_TRUE(exists(mine.name())) << "a live process's segment was removed";
}

// Memory weftd hands to other processes by descriptor keeps its size: none of them can shrink it
// under the others' mappings.
TEST(ShmSegment, AnonymousSegmentsAreSealedAgainstResizing) {
  int fd = -1;
  ShmSegment s = ShmSegment::createAnonymous("sealtest", 1 << 16, &fd);
  ASSERT_GE(fd, 0);
  EXPECT_NE(::ftruncate(fd, 0), 0);
  EXPECT_NE(::ftruncate(fd, 1 << 20), 0);
  static_cast<volatile uint8_t*>(s.data())[(1 << 16) - 1] = 1;  // still mapped in full
  ::close(fd);
}

}  // namespace
}  // namespace weft::transport
