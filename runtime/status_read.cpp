#include "status_read.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.hpp"
#include "common/process.hpp"

namespace weft::status {

namespace {

// A writer holds the seqlock for a microsecond or so, unless it is preempted there: retry at once
// a few times, then give it a millisecond.
constexpr int kReadTries = 400;

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool readAll(int fd, void* buf, size_t bytes, off_t at) {
  auto* p = static_cast<uint8_t*>(buf);
  for (size_t got = 0; got < bytes;) {
    const ssize_t n = pread(fd, p + got, bytes - got, at + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// Whether [offset, offset + count * size) lies inside the page, after the header.
bool fits(uint64_t offset, uint64_t count, uint64_t size, uint64_t pageBytes) {
  return offset >= sizeof(PageHeader) && offset <= pageBytes && count <= (pageBytes - offset) / size;
}

bool terminated(const char* s, size_t n) { return memchr(s, '\0', n) != nullptr; }

// What is wrong with a consistent copy's header, or "".
std::string checkHeader(const PageHeader& h, uint64_t fileBytes) {
  if (h.pageBytes != fileBytes)
    return "truncated or padded: " + std::to_string(fileBytes) + " bytes, its header says " +
           std::to_string(h.pageBytes);
  if (h.headerBytes != sizeof(PageHeader)) return "corrupt: header size " + std::to_string(h.headerBytes);
  if (h.nranks < 1 || h.nranks > (1 << 24) || h.rank < 0 || h.rank >= h.nranks)
    return "corrupt: rank " + std::to_string(h.rank) + " of " + std::to_string(h.nranks);
  if (h.pid <= 0) return "corrupt: pid " + std::to_string(h.pid);
  if (h.depth < 1 || h.historyRows > 4096 || h.historyNext >= std::max(h.historyRows, 1u))
    return "corrupt: queue depth " + std::to_string(h.depth) + ", history " + std::to_string(h.historyRows);
  if (!fits(h.slotsOffset, h.depth, sizeof(OpRow), fileBytes) ||
      !fits(h.progressOffset, h.depth, sizeof(SlotProgress), fileBytes) ||
      !fits(h.historyOffset, h.historyRows, sizeof(OpRow), fileBytes) ||
      !fits(h.pathsOffset, static_cast<uint64_t>(h.nranks), 1, fileBytes))
    return "corrupt: its tables run past its end";
  if (!terminated(h.host, sizeof h.host) || !terminated(h.device, sizeof h.device) ||
      !terminated(h.engine, sizeof h.engine))
    return "corrupt: unterminated text";
  if (h.state > static_cast<uint32_t>(PageState::kAborted)) return "corrupt: state " + std::to_string(h.state);
  return "";
}

void liveness(Snapshot* s) {
  const PageHeader& h = s->header;
  // A zombie (a rank killed, its launcher not yet reaping it) is dead.
  s->alive = !processEnded(ProcessIdentity{h.pid, h.procStart, 0});
  const uint64_t start = s->alive ? 0 : processStart(h.pid);
  s->liveness = s->alive                                                 ? "alive"
                : start != 0 && h.procStart != 0 && start != h.procStart ? "dead (pid reused)"
                                                                         : "dead";
}

// Opens the status directory (refusing an unsafe one, as the writer does) and lists its entries,
// sorted. Returns its descriptor, or -1 where the directory does not exist yet.
int openListed(const std::string& dir, std::vector<std::string>* names) {
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 && errno == ENOENT) return -1;
  std::string why;
  const int dirFd = status::openDirectory(dir, false, &why);
  if (dirFd < 0) throw Error(Code::kInvalidArgument, why);
  if (DIR* d = fdopendir(dup(dirFd))) {
    while (const dirent* e = readdir(d)) names->push_back(e->d_name);
    closedir(d);
  }
  std::sort(names->begin(), names->end());
  return dirFd;
}

}  // namespace

std::string Snapshot::rowState(size_t i) const {
  const OpRow& r = inFlight[i];
  const SlotProgress& p = progress[i];
  const bool started = p.ticket == r.ticket && p.startNs != 0;
  // On a GPU stream until the status watch sees it start (where it has one: status_interval_ms).
  if (r.state == static_cast<uint32_t>(RowState::kEnqueued)) return started ? "running" : "on stream";
  return started ? "running" : "queued";
}

bool readPage(int dirFd, const std::string& name, Snapshot* out, std::string* why, std::vector<uint8_t>* raw) {
  const int fd = openat(dirFd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ELOOP ? "a symbolic link, not a page" : systemErrorMessage("cannot be opened", errno);
    return false;
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    *why = systemErrorMessage("stat", errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    *why = "not a regular file";
    return false;
  }
  if (st.st_uid != getuid()) {
    *why = "foreign: owned by uid " + std::to_string(st.st_uid) + ", not by this user";
    return false;
  }
  const auto fileBytes = static_cast<uint64_t>(st.st_size);
  if (fileBytes < sizeof(PageHeader)) {
    *why = "truncated: " + std::to_string(fileBytes) + " bytes, less than a page's header (" +
           std::to_string(sizeof(PageHeader)) + ")";
    return false;
  }
  if (fileBytes > kMaxPageBytes) {
    *why = "too large for a page: " + std::to_string(fileBytes) + " bytes";
    return false;
  }
  // Magic and version never change once the page has its name: check them before the seqlock.
  PageHeader h{};
  if (!readAll(fd, &h, sizeof h, 0)) {
    *why = "truncated while read";
    return false;
  }
  if (h.magic != kMagic) {
    *why = "not a weft status page (bad magic)";
    return false;
  }
  if (h.version != kVersion) {
    *why = "written by another weft version (page version " + std::to_string(h.version) + ", this weftctl reads " +
           std::to_string(kVersion) + ")";
    return false;
  }
  std::vector<uint8_t> buf(fileBytes);
  bool consistent = false;
  for (int attempt = 0; attempt < kReadTries && !consistent; ++attempt) {
    if (attempt % 4 == 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    uint64_t before = 0, after = 0;
    if (!readAll(fd, &before, sizeof before, offsetof(PageHeader, seq)) || (before & 1)) continue;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (!readAll(fd, buf.data(), buf.size(), 0)) {
      *why = "truncated while read";
      return false;
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (!readAll(fd, &after, sizeof after, offsetof(PageHeader, seq))) continue;
    memcpy(&h, buf.data(), sizeof h);
    consistent = before == after && h.seq == before;
  }
  if (!consistent) {
    *why = "never consistent in " + std::to_string(kReadTries) + " reads (its writer died mid-update?)";
    return false;
  }
  if (!parsePage(name, buf, out, why)) return false;
  out->readNs = monotonicNs();
  liveness(out);
  if (raw) *raw = std::move(buf);
  return true;
}

bool parsePage(const std::string& name, const std::vector<uint8_t>& buf, Snapshot* out, std::string* why) {
  const uint64_t fileBytes = buf.size();
  PageHeader h{};
  if (fileBytes < sizeof h) {
    *why = "truncated: " + std::to_string(fileBytes) + " bytes, less than a page's header";
    return false;
  }
  memcpy(&h, buf.data(), sizeof h);
  if (h.magic != kMagic || h.version != kVersion) {
    *why = h.magic != kMagic ? "not a weft status page (bad magic)"
                             : "written by another weft version (page version " + std::to_string(h.version) + ")";
    return false;
  }
  if (std::string bad = checkHeader(h, fileBytes); !bad.empty()) {
    *why = bad;
    return false;
  }
  Snapshot s;
  s.name = name;
  s.header = h;
  const uint8_t* base = buf.data();
  std::vector<OpRow> slots(h.depth);
  std::vector<SlotProgress> progress(h.depth);
  memcpy(slots.data(), base + h.slotsOffset, h.depth * sizeof(OpRow));
  memcpy(progress.data(), base + h.progressOffset, h.depth * sizeof(SlotProgress));
  std::vector<std::pair<OpRow, SlotProgress>> live;
  for (uint32_t i = 0; i < h.depth; ++i) {
    const auto st = static_cast<RowState>(slots[i].state);
    if (st != RowState::kQueued && st != RowState::kEnqueued) continue;
    live.emplace_back(slots[i], progress[i].ticket == slots[i].ticket ? progress[i] : SlotProgress{});
  }
  std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) { return a.first.ticket < b.first.ticket; });
  for (const auto& [row, words] : live) {
    s.inFlight.push_back(row);
    s.progress.push_back(words);
  }
  for (uint32_t i = 0; i < h.historyRows; ++i) {
    OpRow r;
    memcpy(&r, base + h.historyOffset + ((h.historyNext + i) % h.historyRows) * sizeof(OpRow), sizeof r);
    if (r.state == static_cast<uint32_t>(RowState::kDone)) s.history.push_back(r);
  }
  for (int32_t r = 0; r < h.nranks; ++r) {
    const uint8_t p = base[h.pathsOffset + static_cast<uint64_t>(r)];
    s.paths.push_back(p <= static_cast<uint8_t>(transport::Path::kProxy) ? static_cast<transport::Path>(p)
                                                                         : transport::Path::kProxy);
  }
  *out = std::move(s);
  return true;
}

Listing readDirectory(const std::string& dir) {
  Listing out;
  out.dir = dir;
  std::vector<std::string> names;
  const int dirFd = openListed(dir, &names);
  if (dirFd < 0) {
    out.missing = true;
    return out;
  }
  std::string why;
  for (const std::string& n : names) {
    if (!endsWith(n, ".page")) continue;
    Snapshot s;
    if (readPage(dirFd, n, &s, &why))
      out.pages.push_back(std::move(s));
    else
      out.refused.push_back({n, why});
  }
  close(dirFd);
  std::stable_sort(out.pages.begin(), out.pages.end(), [](const Snapshot& a, const Snapshot& b) {
    return a.header.commId != b.header.commId ? a.header.commId < b.header.commId : a.header.rank < b.header.rank;
  });
  return out;
}

std::vector<std::string> removeDead(const std::string& dir) {
  std::vector<std::string> removed, names;
  const int dirFd = openListed(dir, &names);
  if (dirFd < 0) return removed;
  std::string why;
  for (const std::string& n : names) {
    bool dead = false;
    if (endsWith(n, ".page")) {
      Snapshot s;
      dead = readPage(dirFd, n, &s, &why) && !s.alive;
    } else if (endsWith(n, ".new")) {
      // A page its process never finished making: "<comm>-r<rank>-p<pid>-<n>.new".
      const size_t at = n.find("-p");
      const int pid = at == std::string::npos ? 0 : atoi(n.c_str() + at + 2);
      struct stat fs {};
      dead = pid > 0 && processEnded(ProcessIdentity{pid}) &&
             fstatat(dirFd, n.c_str(), &fs, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(fs.st_mode) && fs.st_uid == getuid();
    }
    if (dead && unlinkat(dirFd, n.c_str(), 0) == 0) removed.push_back(n);
  }
  close(dirFd);
  return removed;
}

namespace {
constexpr const char* kStreamHead = "weft-pages 1";
constexpr const char* kRecordHead = "weft-page";
const char* const kLiveness[] = {"alive", "dead", "dead (pid reused)"};
}  // namespace

std::string encodePages(const std::string& dir, std::vector<Refusal>* refused) {
  std::string out = std::string(kStreamHead) + "\n";
  std::vector<std::string> names;
  const int dirFd = openListed(dir, &names);
  if (dirFd < 0) return out;
  std::string why;
  for (const std::string& n : names) {
    if (!endsWith(n, ".page")) continue;
    Snapshot s;
    std::vector<uint8_t> raw;
    if (!readPage(dirFd, n, &s, &why, &raw)) {
      refused->push_back({n, why});
      continue;
    }
    const int live = s.alive ? 0 : s.liveness == kLiveness[1] ? 1 : 2;
    out += std::string(kRecordHead) + " " + n + " " + std::to_string(raw.size()) + " " + std::to_string(live) + " " +
           std::to_string(s.readNs) + "\n";
    out.append(reinterpret_cast<const char*>(raw.data()), raw.size());
  }
  close(dirFd);
  return out;
}

Listing decodePages(const std::string& stream, const std::string& source) {
  Listing out;
  out.dir = source;
  size_t at = 0;
  auto line = [&](std::string* l) {
    const size_t end = stream.find('\n', at);
    if (end == std::string::npos || end - at > 512) return false;
    *l = stream.substr(at, end - at);
    at = end + 1;
    return true;
  };
  std::string l;
  if (!line(&l) || l != kStreamHead) {
    out.refused.push_back({source, "not what weftctl pages writes (or of another version)"});
    return out;
  }
  while (at < stream.size()) {
    char name[256] = {};
    unsigned long long bytes = 0, readNs = 0;
    int live = -1, used = 0;
    if (!line(&l) || sscanf(l.c_str(), "weft-page %255s %llu %d %llu%n", name, &bytes, &live, &readNs, &used) != 4 ||
        static_cast<size_t>(used) != l.size() || live < 0 || live > 2 || bytes > kMaxPageBytes ||
        bytes > stream.size() - at) {
      out.refused.push_back({source, "a malformed or truncated record after " + std::to_string(out.pages.size()) +
                                         " pages; the rest is ignored"});
      break;
    }
    const std::vector<uint8_t> raw(stream.begin() + static_cast<std::ptrdiff_t>(at),
                                   stream.begin() + static_cast<std::ptrdiff_t>(at + bytes));
    at += bytes;
    Snapshot s;
    std::string why;
    if (!parsePage(name, raw, &s, &why)) {
      out.refused.push_back({source + ":" + name, why});
      continue;
    }
    // Ages are differences of the page's own host's clock, as of when it was read there.
    s.readNs = readNs;
    s.alive = live == 0;
    s.liveness = kLiveness[live];
    s.source = source;
    out.pages.push_back(std::move(s));
  }
  return out;
}

const char* kindName(uint32_t kind) {
  static const char* const kNames[] = {
      "nop",  "allreduce",          "alltoall",     "allreduce_oneshot", "gemv_allreduce",
      "gemv", "embedding_alltoall", "gemm_alltoall"};
  return kind < kKinds ? kNames[kind] : "unknown";
}

const char* dtypeName(uint32_t dtype) {
  return dtype == 0 ? "float32" : dtype == 1 ? "float16" : dtype == 2 ? "bfloat16" : "unknown";
}

const char* statusName(uint32_t status) {
  static const char* const kNames[] = {"ok", "timeout", "aborted", "peer_failed", "bad_input", "transport", "mismatch"};
  return status < sizeof kNames / sizeof kNames[0] ? kNames[status] : "unknown";
}

const char* pageStateName(uint32_t state) {
  return state == 0 ? "running" : state == 1 ? "failed" : state == 2 ? "aborted" : "unknown";
}

}  // namespace weft::status
