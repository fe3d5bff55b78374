#include "status_page.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/process.hpp"
#include "device/ops/gemm/gemm_alltoall_device.hpp"
#include "device/primitives_device.hpp"

namespace weft::status {

namespace prim = weft::prim;

namespace {

// Pages still linked in this process, removed at normal exit (a crash leaves at most the page).
// Leaked on purpose: it must outlive every static destructor that could destroy a communicator.
struct ExitList {
  std::mutex mutex;
  std::set<std::pair<int, std::string>> pages;  // (directory descriptor, name)
  pid_t owner = 0;  // a forked child inherits the list but must not remove its parent's pages
};

ExitList& exitList() {
  static ExitList* list = [] {
    auto* l = new ExitList;
    l->owner = getpid();
    std::atexit([] {
      ExitList& x = exitList();
      std::lock_guard<std::mutex> lock(x.mutex);
      if (x.owner != getpid()) return;
      for (const auto& [dir, name] : x.pages) unlinkat(dir, name.c_str(), 0);
      x.pages.clear();
    });
    return l;
  }();
  return *list;
}

void copyText(char* dst, size_t n, const std::string& s) { snprintf(dst, n, "%s", s.c_str()); }

constexpr uint64_t align8(uint64_t v) { return (v + 7) / 8 * 8; }

}  // namespace

uint64_t pageBytes(uint32_t depth, int32_t nranks) {
  return sizeof(PageHeader) + uint64_t{depth} * (sizeof(OpRow) + sizeof(SlotProgress)) +
         uint64_t{kHistoryRows} * sizeof(OpRow) + align8(static_cast<uint64_t>(nranks));
}

uint64_t monotonicNs() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

std::string directory(const std::string& setting) {
  return setting.empty() ? "/dev/shm/weft-" + std::to_string(getuid()) : setting;
}

int openDirectory(const std::string& path, bool create, std::string* why) {
  if (create && mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    *why = systemErrorMessage("status directory '" + path + "': cannot be created", errno);
    return -1;
  }
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = systemErrorMessage("status directory '" + path + "'", errno);
    return -1;
  }
  struct stat st {};
  std::string bad;
  if (fstat(fd, &st) != 0)
    bad = systemErrorMessage("stat", errno);
  else if (st.st_uid != getuid())
    bad = "owned by uid " + std::to_string(st.st_uid) + ", not by this user (" + std::to_string(getuid()) + ")";
  else if ((st.st_mode & 077) != 0)
    bad = "open to group or others (mode " + std::to_string((st.st_mode >> 6) & 7) +
          std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) + "; it must be 0700)";
  if (bad.empty()) return fd;
  close(fd);
  *why = "status directory '" + path + "': " + bad;
  return -1;
}

uint64_t commId(const uint8_t* idBytes, size_t n) {
  // FNV-1a, then a finaliser: ids differ in their random secret, which this mixes into all 64 bits.
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ idBytes[i]) * 0x100000001b3ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

bool pageRemains(const std::string& dir, uint64_t commId, int rank, int pid) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "%016llx-r%d-p%d-", static_cast<unsigned long long>(commId), rank, pid);
  DIR* d = opendir(dir.c_str());
  if (!d) return false;
  bool found = false;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) == 0 && name.size() > 5 && name.compare(name.size() - 5, 5, ".page") == 0) {
      found = true;
      break;
    }
  }
  closedir(d);
  return found;
}

std::unique_ptr<Page> Page::create(const std::string& dir, const Identity& id, uint32_t depth) {
  std::string why;
  const int dirFd = openDirectory(dir, true, &why);
  if (dirFd < 0) {
    WEFT_LOG(kWarn, kInit, "rank {}: no status page (weftctl queue will not show it): {}", id.rank, why);
    return nullptr;
  }
  static std::atomic<uint32_t> serial{0};
  char name[96];
  snprintf(name, sizeof name, "%016llx-r%d-p%d-%u", static_cast<unsigned long long>(id.commId), id.rank,
           static_cast<int>(getpid()), serial.fetch_add(1));
  std::unique_ptr<Page> page(new Page);
  page->dirFd_ = dirFd;
  page->name_ = std::string(name) + ".page";
  page->bytes_ = pageBytes(depth, id.nranks);
  // Written under a temporary name and renamed when whole, so that readers never meet it half made.
  const std::string temp = std::string(name) + ".new";
  const int fd = openat(dirFd, temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  void* data = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(page->bytes_)) == 0)
    data = mmap(nullptr, page->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  if (fd >= 0) close(fd);
  if (data == MAP_FAILED) {
    if (fd >= 0) unlinkat(dirFd, temp.c_str(), 0);
    WEFT_LOG(kWarn, kInit, "rank {}: no status page: {}", id.rank,
             systemErrorMessage(dir + "/" + temp + ": cannot be created", err));
    return nullptr;  // the destructor closes dirFd
  }
  page->data_ = data;
  PageHeader* h = page->header();
  h->version = kVersion;
  h->headerBytes = sizeof(PageHeader);
  h->pageBytes = page->bytes_;
  h->commId = id.commId;
  h->rank = id.rank;
  h->nranks = id.nranks;
  h->pid = static_cast<int32_t>(getpid());
  h->uid = getuid();
  h->procStart = processStart(h->pid);
  h->createdNs = h->updatedNs = monotonicNs();
  h->depth = depth;
  h->historyRows = kHistoryRows;
  copyText(h->host, sizeof h->host, id.host);
  copyText(h->device, sizeof h->device, id.device);
  copyText(h->engine, sizeof h->engine, id.engine);
  h->slotsOffset = sizeof(PageHeader);
  h->progressOffset = h->slotsOffset + uint64_t{depth} * sizeof(OpRow);
  h->historyOffset = h->progressOffset + uint64_t{depth} * sizeof(SlotProgress);
  h->pathsOffset = h->historyOffset + uint64_t{kHistoryRows} * sizeof(OpRow);
  auto* paths = static_cast<uint8_t*>(data) + h->pathsOffset;
  for (size_t r = 0; r < id.paths.size() && r < static_cast<size_t>(id.nranks); ++r)
    paths[r] = static_cast<uint8_t>(id.paths[r]);
  prim::atomicStore<prim::Order::kRelease>(&h->magic, kMagic);
  if (renameat(dirFd, temp.c_str(), dirFd, page->name_.c_str()) != 0) {
    WEFT_LOG(kWarn, kInit, "rank {}: no status page: {}", id.rank,
             systemErrorMessage(dir + "/" + page->name_ + ": cannot be created", errno));
    unlinkat(dirFd, temp.c_str(), 0);
    return nullptr;
  }
  page->linked_ = true;
  ExitList& exits = exitList();
  std::lock_guard<std::mutex> lock(exits.mutex);
  exits.pages.emplace(dirFd, page->name_);
  return page;
}

Page::~Page() {
  unlinkFile();
  if (data_) munmap(data_, bytes_);
  if (dirFd_ >= 0) close(dirFd_);
}

void Page::unlinkFile() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!linked_) return;
  linked_ = false;
  unlinkat(dirFd_, name_.c_str(), 0);
  ExitList& exits = exitList();
  std::lock_guard<std::mutex> exitLock(exits.mutex);
  exits.pages.erase({dirFd_, name_});
}

SlotProgress* Page::progress() const {
  return reinterpret_cast<SlotProgress*>(static_cast<uint8_t*>(data_) + header()->progressOffset);
}

// The seqlock's writer side (Boehm's): seq odd, a release fence, the change, seq even (release).
template <class F>
void Page::update(F&& change) {
  std::lock_guard<std::mutex> lock(mutex_);
  PageHeader* h = header();
  const uint64_t seq = prim::atomicLoad<prim::Order::kRelaxed>(&h->seq);
  prim::atomicStore<prim::Order::kRelaxed>(&h->seq, seq + 1);
  std::atomic_thread_fence(std::memory_order_release);
  change(*h);
  if (proxyCounts_) h->proxy = proxyCounts_();
  h->updatedNs = monotonicNs();
  prim::atomicStore<prim::Order::kRelease>(&h->seq, seq + 2);
}

OpRow Page::submitted(uint64_t ticket, const dev::OpDesc& d, uint64_t bytes, bool onStream, uint32_t items) {
  const uint64_t now = monotonicNs();
  OpRow written{};
  update([&](PageHeader& h) {
    OpRow& r = rows(h.slotsOffset)[ticket % h.depth];
    r = OpRow{};
    r.ticket = ticket;
    r.state = static_cast<uint32_t>(onStream ? RowState::kEnqueued : RowState::kQueued);
    r.kind = d.kind;
    r.dtype = d.dtype;
    r.nitems = items;
    r.count = d.count;
    r.bytes = bytes;
    if (d.kind == static_cast<uint32_t>(dev::OpKind::kGemmAllToAll) && dev::GemmAllToAllOp::args(d).productGiven())
      r.flags |= kRowVendorProduct;
    if (d.kind == static_cast<uint32_t>(dev::OpKind::kEmbeddingAllToAll) && d.args.embedding.pooled != 0)
      r.flags |= kRowPooledFirst;
    r.submitNs = now;
    h.submitted = std::max(h.submitted, ticket + 1);
    written = r;
    // The slot's live words: the thread that waits on the op (or the status watch, under this
    // lock) is the only writer until the op returns.
    SlotProgress& p = progress()[ticket % h.depth];
    prim::atomicStore<prim::Order::kRelaxed>(&p.itemsDone, uint64_t{0});
    prim::atomicStore<prim::Order::kRelaxed>(&p.startNs, uint64_t{0});
    prim::atomicStore<prim::Order::kRelease>(&p.ticket, ticket);
  });
  return written;
}

void Page::progressed(uint64_t ticket, uint64_t itemsDone, uint64_t startNs) {
  std::lock_guard<std::mutex> lock(mutex_);
  SlotProgress& p = progress()[ticket % header()->depth];
  if (prim::atomicLoad<prim::Order::kRelaxed>(&p.ticket) != ticket) return;
  prim::atomicStore<prim::Order::kRelaxed>(&p.itemsDone, itemsDone);
  prim::atomicStore<prim::Order::kRelaxed>(&p.startNs, startNs);
}

void Page::ended(uint64_t ticket, dev::Status st, const dev::QueueHeader* queue, const OpRow* asSubmitted) {
  const uint64_t now = monotonicNs();
  update([&](PageHeader& h) {
    OpRow& slot = rows(h.slotsOffset)[ticket % h.depth];
    const bool inSlot = slot.ticket == ticket && slot.state != static_cast<uint32_t>(RowState::kEmpty);
    if (!inSlot && asSubmitted == nullptr) return;
    OpRow gone = asSubmitted ? *asSubmitted : OpRow{};
    OpRow& r = inSlot ? slot : gone;
    r.state = static_cast<uint32_t>(RowState::kDone);
    r.status = static_cast<uint32_t>(st);
    r.endNs = now;
    rows(h.historyOffset)[h.historyNext] = r;
    h.historyNext = (h.historyNext + 1) % h.historyRows;
    ++h.ended;
    Counters& c = h.counters;
    if (r.kind < kKinds) {
      ++c.ops[r.kind];
      c.bytes[r.kind] += r.bytes;
    }
    if (st == dev::Status::kTimeout) ++c.timeouts;
    if (st == dev::Status::kAborted) ++c.aborts;
    if (st != dev::Status::kOk && st != dev::Status::kTimeout && st != dev::Status::kAborted) ++c.errors;
    if (st == dev::Status::kOk) return;
    if (h.state == static_cast<uint32_t>(PageState::kRunning)) h.state = static_cast<uint32_t>(PageState::kFailed);
    if (const dev::WaitRecord* first = h.failureValid ? nullptr : firstFailure(*queue)) {
      h.failure = *first;
      h.failureNs = now;
      h.failureValid = 1;
    }
  });
}

void Page::countProxyTraffic(ProxyCountsSource source) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    proxyCounts_ = std::move(source);
  }
  update([](PageHeader& h) { h.proxied = 1; });
}

void Page::aborted() {
  update([](PageHeader& h) { h.state = static_cast<uint32_t>(PageState::kAborted); });
  unlinkFile();
}

}  // namespace weft::status
