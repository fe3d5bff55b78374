// The status page: what one rank of a communicator is doing, in a small file that weftctl reads
// (`weftctl queue`, `weftctl diagnose`). One file per communicator and rank, named
// "<comm id>-r<rank>-p<pid>-<n>.page", in a directory of the job's user (status_dir; by default
// /dev/shm/weft-<uid>, mode 0700; the page 0600).
//
// Wire format between the runtime and weftctl of the same version. The runtime writes everything
// under a seqlock (PageHeader::seq odd while it changes anything), at submit and when the host
// sees an op end; a reader copies the file and keeps the copy only if seq was the same even value
// before and after. The live words (SlotProgress) are outside the seqlock: each is a whole
// aligned word, written by the one thread that waits on the slot's op, so a reader may see it a
// moment old but never half-written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/queue_device.hpp"
#include "transport/path.hpp"
#include "work_queue.hpp"

namespace weft::status {

constexpr uint64_t kMagic = 0x7461747374666577ull;  // "weftstat" in memory order
constexpr uint32_t kVersion = 2;                    // 2: the host proxy's traffic (ProxyCounts)
constexpr uint32_t kHistoryRows = 16;               // the last ops the host saw end
constexpr uint32_t kKinds = 8;                      // dev::OpKind values counted (kNop .. kGemmAllToAll)
constexpr uint64_t kMaxPageBytes = uint64_t{64} << 20;

// An op row's state as the writer sets it. A reader shows kQueued as running once the row's
// SlotProgress::startNs is set.
enum class RowState : uint32_t {
  kEmpty = 0,
  kQueued = 1,    // published; ops before it may still run
  kEnqueued = 2,  // handed to the caller's stream (GPU backends: the host does not see it end)
  kDone = 3,      // the host saw it end; `status` says how
};
enum class PageState : uint32_t { kRunning = 0, kFailed = 1, kAborted = 2 };

// One op, in a queue slot's row (slot ticket % depth) or in the history.
struct OpRow {
  uint64_t ticket;
  uint32_t state;  // RowState
  uint32_t kind;   // dev::OpKind
  uint32_t dtype;  // dev::DType
  uint32_t nitems;
  uint64_t count;     // the op's count argument (All-to-All: per rank; GEMV: y's n); 0 where it has none
  uint64_t bytes;     // bytes the op writes on this rank
  uint64_t submitNs;  // CLOCK_MONOTONIC, as every time on the page
  uint64_t endNs;     // when the host saw it end (kDone)
  uint32_t status;    // dev::Status (kDone)
  uint32_t flags;     // kRow* bits (0 in pages of older runtimes, where the word was reserved)
};
static_assert(sizeof(OpRow) == 64, "OpRow is a wire struct");
// A GEMM + All-to-All that routed the vendor BLAS's product (gemm_path blas) instead of
// computing its tiles.
constexpr uint32_t kRowVendorProduct = 1;
// OpRow::flags: an embedding op that sent vectors pooled before it (embedding_path unfused).
constexpr uint32_t kRowPooledFirst = 2;

struct Counters {
  uint64_t ops[kKinds];    // ops ended, by dev::OpKind
  uint64_t bytes[kKinds];  // their OpRow::bytes
  uint64_t timeouts;
  uint64_t aborts;
  uint64_t errors;  // any other failure (bad input, transport)
  uint64_t reserved;
};

// What the rank's host proxy has sent (transport::Proxy::traffic), as of the page's last update
// (each op's submit and end); all zero where no peer is reached through the proxy.
struct ProxyCounts {
  uint64_t parts;     // messages cut from the kernels' triggers (data, signals, flagged data)
  uint64_t messages;  // wire messages they went in (a batch is one)
  uint64_t batches;   // of those, batches of several parts
  uint64_t writes;    // RMA writes (tiles at or above proxy_eager_bytes)
};

struct PageHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t headerBytes;  // sizeof(PageHeader)
  uint64_t pageBytes;    // the whole file
  uint64_t seq;          // seqlock: odd while the writer changes the page
  uint64_t commId;       // the same on every rank of the communicator
  int32_t rank;
  int32_t nranks;
  int32_t pid;
  uint32_t uid;
  uint64_t procStart;  // the process's start time (/proc/<pid>/stat), to tell a reused pid
  uint64_t createdNs;
  uint64_t updatedNs;
  uint32_t state;        // PageState
  uint32_t depth;        // queue slots: OpRow and SlotProgress entries
  uint32_t historyRows;  // kHistoryRows
  uint32_t historyNext;  // the history's next row (ring)
  uint64_t submitted;    // ops submitted (tickets taken)
  uint64_t ended;        // ops the host saw end
  char host[64];
  char device[64];
  char engine[96];
  Counters counters;
  uint32_t failureValid;  // the queue's first failure, copied when the host saw it
  uint32_t reserved;
  uint64_t failureNs;
  dev::WaitRecord failure;
  uint64_t slotsOffset;     // OpRow[depth]
  uint64_t progressOffset;  // SlotProgress[depth] (live words)
  uint64_t historyOffset;   // OpRow[historyRows]
  uint64_t pathsOffset;     // uint8_t[nranks]: transport::Path to each rank
  uint32_t proxied;         // 1: some peer is reached through the host proxy (`proxy` counts)
  uint32_t reserved2;
  ProxyCounts proxy;
};
static_assert(offsetof(PageHeader, magic) == 0 && offsetof(PageHeader, version) == 8,
              "every version starts so: any weftctl can tell which version a page has");
static_assert(sizeof(PageHeader) % 8 == 0, "rows follow the header");

uint64_t pageBytes(uint32_t depth, int32_t nranks);
uint64_t monotonicNs();
// status_dir, or /dev/shm/weft-<uid> where it is empty.
std::string directory(const std::string& setting);
// Opens the directory (creating it, mode 0700, if `create`), refusing one that is a symbolic
// link, not the caller's, or open to group or others. Returns the descriptor, or -1 and *why.
int openDirectory(const std::string& path, bool create, std::string* why);
// The same 64 bits on every rank of a communicator, from its unique id's bytes.
uint64_t commId(const uint8_t* idBytes, size_t n);
// Whether `dir` holds a page of communicator `commId`'s rank `rank` made by process `pid`: a rank
// removes its page when it destroys the communicator, so a process that ended with its page still
// there ended without destroying it.
bool pageRemains(const std::string& dir, uint64_t commId, int rank, int pid);

// What a communicator shows of itself on its page.
struct Identity {
  uint64_t commId = 0;
  int rank = 0;
  int nranks = 0;
  std::string host, device, engine;
  std::vector<transport::Path> paths;
};

// Reads the host proxy's counts for the page (thread-safe, never waits).
using ProxyCountsSource = std::function<ProxyCounts()>;

// This rank's page. Thread-safe; nothing here waits on a peer or the engine.
class Page {
 public:
  // Creates the page, or returns null after one warning (a page is never worth failing init for).
  static std::unique_ptr<Page> create(const std::string& dir, const Identity& id, uint32_t depth);
  ~Page();  // removes the file
  Page(const Page&) = delete;
  Page& operator=(const Page&) = delete;

  // Where host waits write their op's progress (WorkQueue::reportProgress).
  SlotProgress* progress() const;
  // Records op `ticket` in its slot's row (`items`: the items the engine runs it as) and returns
  // the row.
  OpRow submitted(uint64_t ticket, const dev::OpDesc& d, uint64_t bytes, bool onStream, uint32_t items);
  // The status watch's progress of op `ticket` (GPU backends, whose host waits on no op), kept
  // only while the slot's live words are still that op's.
  void progressed(uint64_t ticket, uint64_t itemsDone, uint64_t startNs);
  // The host saw op `ticket` end with `st`; on a failure, `queue` holds the first failure's record.
  // `asSubmitted`: the op's row as submitted() returned it, for the history and counters where its
  // slot's row has since gone to a later op (a GPU stream may hold more ops than the queue has
  // slots).
  void ended(uint64_t ticket, dev::Status st, const dev::QueueHeader* queue, const OpRow* asSubmitted = nullptr);
  // weft_comm_abort: the page says so and its file goes (the process may well exit next).
  void aborted();
  // From now on every update of the page copies the host proxy's counts from `source`, which must
  // stay callable for the page's life.
  void countProxyTraffic(ProxyCountsSource source);

 private:
  Page() = default;
  template <class F>
  void update(F&& change);
  PageHeader* header() const { return static_cast<PageHeader*>(data_); }
  OpRow* rows(uint64_t offset) const { return reinterpret_cast<OpRow*>(static_cast<uint8_t*>(data_) + offset); }
  void unlinkFile();

  std::mutex mutex_;
  ProxyCountsSource proxyCounts_;  // under mutex_
  void* data_ = nullptr;
  size_t bytes_ = 0;
  int dirFd_ = -1;
  std::string name_;
  bool linked_ = false;
};

}  // namespace weft::status
