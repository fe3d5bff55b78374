#include "process.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

namespace weft {
namespace {

struct StatFields {
  char state = '?';
  uint64_t start = 0;
};

// Fields 3 (the state) and 22 (the start time) of /proc/<pid>/stat; state '?' if unreadable.
StatFields readStat(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  StatFields f;
  if (!std::getline(in, line)) return f;
  // Field 2 (the command) may hold spaces and parentheses: count from the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return f;
  f.state = line[close + 2];
  const char* p = line.c_str() + close + 1;
  for (int field = 3; field < 22 && *p; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
  }
  f.start = std::strtoull(p, nullptr, 10);
  return f;
}

}  // namespace

ProcessIdentity thisProcess() {
  ProcessIdentity p;
  p.pid = static_cast<int32_t>(getpid());
  p.start = processStart(p.pid);
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) == 0) p.pidNamespace = st.st_ino;
  p.host = thisHostHash();
  return p;
}

uint64_t processStart(int pid) { return readStat(pid).start; }

bool processEnded(const ProcessIdentity& p) {
  if (p.pid <= 0) return false;
  if (kill(p.pid, 0) != 0 && errno == ESRCH) return true;
  const StatFields f = readStat(p.pid);
  if (f.state == '?') return kill(p.pid, 0) != 0 && errno == ESRCH;  // gone between the two reads
  if (f.state == 'Z' || f.state == 'X') return true;
  return p.start != 0 && f.start != 0 && f.start != p.start;
}

uint64_t thisHostHash() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string bootId;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
  uint64_t x = 1469598103934665603ull;
  for (unsigned char c : std::string(name) + "/" + bootId) x = (x ^ c) * 1099511628211ull;
  return x;
}

bool watchable(const ProcessIdentity& p) {
  const ProcessIdentity self = thisProcess();  // not cached: a forked child is another process
  return p.pid > 0 && p.pid != self.pid && self.pidNamespace != 0 && p.pidNamespace == self.pidNamespace &&
         p.host == self.host;
}

bool ProcessWatch::anyWatchable(const std::vector<ProcessIdentity>& watched) {
  for (const ProcessIdentity& p : watched)
    if (watchable(p)) return true;
  return false;
}

namespace {

// `watched` with every identity that cannot be checked cleared (left alone).
std::vector<ProcessIdentity> watchableOnly(std::vector<ProcessIdentity> watched) {
  for (ProcessIdentity& p : watched)
    if (!watchable(p)) p = ProcessIdentity{};
  return watched;
}

}  // namespace

ProcessWatch::ProcessWatch(std::vector<ProcessIdentity> watched, std::chrono::milliseconds interval,
                           std::function<bool(int, const ProcessIdentity&)> ended, std::function<void()> look)
    : watched_(watchableOnly(std::move(watched))),
      ended_(std::move(ended)),
      look_(std::move(look)),
      thread_(interval, [this] { return lookOnce(); }) {}

ProcessWatch::~ProcessWatch() = default;

bool ProcessWatch::lookOnce() {
  if (look_) look_();
  for (size_t i = 0; i < watched_.size(); ++i) {
    if (!watched_[i].pid || !processEnded(watched_[i])) continue;
    const ProcessIdentity gone = watched_[i];
    watched_[i] = ProcessIdentity{};
    if (!ended_(static_cast<int>(i), gone)) return false;
  }
  return true;
}

}  // namespace weft
