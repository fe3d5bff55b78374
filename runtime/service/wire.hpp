// weftd's message protocol on its Unix socket. Every message is a 16-byte header and a body of
// at most kMaxBodyBytes; file descriptors (SCM_RIGHTS) ride with the header's first byte, and the
// header says how many. Both sides treat what arrives as untrusted: FrameReader checks the header
// before it waits for a body, and each decode* function checks a body's fields before anything in
// it is used. One version: a peer of another version is answered with kRefused, never guessed at.
// Bodies are plain structs of fixed layout (both ends are builds of the same weft on one host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace weft::service {

constexpr uint32_t kWireMagic = 0x64746677;  // "wftd"
constexpr uint16_t kWireVersion = 5;         // 5: Attach::engineInWeftd (service_engine)
constexpr uint32_t kMaxBodyBytes = 16384;
constexpr uint32_t kMaxFds = 64;  // a communicator of up to 62 ranks on a node (an attach reply: nranks + 2)
constexpr int kMaxNodeRanks = static_cast<int>(kMaxFds) - 2;
constexpr uint32_t kMaxStatusRows = 256;
constexpr uint32_t kMaxEngineWorkers = 1024;  // persistent_ctas's bound

enum class MsgType : uint16_t {
  kHello = 1,          // client -> weftd: who it is (Hello)
  kWelcome = 2,        // weftd -> client: admitted (Welcome)
  kRefused = 3,        // weftd -> client: refused or failed, and why (Refused); weftd then closes
  kStatusRequest = 4,  // client -> weftd: no body
  kStatusReply = 5,    // weftd -> client: StatusHead, then StatusRow[rows]
  kAttach = 6,         // client -> weftd: a rank of a communicator (Attach)
  kAttached = 7,       // weftd -> client: its heap and queue (Attached, fds: heap, queue)
  kDetach = 8,         // client -> weftd: no body; the communicator ends cleanly (no fault when it closes)
  kDetached = 9,       // weftd -> client: no body; weftd's engine of the rank has stopped
  kMapMemory = 10,     // client -> weftd: device memory of the rank for weftd's GPU engine (MapMemory)
  kMemoryMapped = 11,  // weftd -> client: where weftd maps it (MemoryMapped)
  kWake = 12,          // client -> weftd: no body, no reply; start the rank's engine again (it left on idle)
};

struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;       // MsgType
  uint32_t bodyBytes;  // what follows the header
  uint32_t fdCount;    // descriptors sent with the header (kAttached only)
};
static_assert(sizeof(Header) == 16, "Header is a wire struct");

enum class Role : uint32_t { kLibrary = 1, kCtl = 2 };

// Written by the connecting side, read by weftd.
struct Hello {
  uint32_t role;  // Role
  int32_t pid;    // as the client says (weftd trusts only SO_PEERCRED's)
  char version[32];
};
static_assert(sizeof(Hello) == 40, "Hello is a wire struct");

// Written by weftd.
struct Welcome {
  int32_t pid;
  uint32_t reserved;
  uint64_t instance;  // random per start: tells a restarted weftd from the one a client attached to
  char version[32];
};
static_assert(sizeof(Welcome) == 48, "Welcome is a wire struct");

// Written by weftd (and by FrameReader's callers for their own errors).
struct Refused {
  int32_t code;  // weft::Code
  char message[252];
};
static_assert(sizeof(Refused) == 256, "Refused is a wire struct");

// Written by weftd: the daemon, then one row per connection.
struct StatusHead {
  int32_t pid;
  uint32_t rows;  // StatusRow entries that follow
  uint64_t uptimeNs;
  uint64_t instance;
  uint32_t clients;    // connections of role kLibrary
  uint32_t comms;      // communicators with at least one attached rank
  uint64_t heldBytes;  // shared memory weftd holds for them (heaps and queues)
  char version[32];
  char mps[64];  // MPS state, in words
  char dir[128];
};
static_assert(sizeof(StatusHead) == 264, "StatusHead is a wire struct");

struct StatusRow {
  int32_t pid;  // SO_PEERCRED's
  uint32_t uid;
  uint32_t role;  // Role
  int32_t rank;   // -1: not attached
  int32_t nranks;
  uint32_t reserved;
  uint64_t commId;
  uint64_t connectedNs;  // how long ago it connected
};
static_assert(sizeof(StatusRow) == 40, "StatusRow is a wire struct");

// Written by the library, read by weftd. The layout fields are what the rank's engine needs
// (dev::HeapLayout); weftd checks that the heap holds their control area.
struct Attach {
  uint64_t commId;  // the same on every rank (status::commId of the unique id)
  int32_t rank;
  int32_t nranks;
  uint64_t heapBytes;      // each rank's segment, control area included
  uint32_t queueDepth;     // the rank's work queue: slots
  uint32_t workers;        // engine workers (persistent_ctas)
  uint32_t inboxSlots;     // dev::HeapLayout
  uint32_t deviceHeaps;    // 1 (GPU builds): each rank's heap is device memory on its GPU, gpus[rank]
  uint64_t tileBytes;      // dev::HeapLayout
  uint64_t oneShotBytes;   // dev::HeapLayout
  uint64_t timeoutNs;      // bound of every wait of the engine
  uint64_t stagingBytes;   // weftd's engine on the CPU backend: the staging segment of inputs outside the heap
  uint32_t engineInWeftd;  // 1: weftd runs the rank's engine (service_engine weftd); 0: the rank does
  uint32_t reserved;       // 0
  // deviceHeaps: every rank's GPU by its PCI location (packPciId), the same on every rank; 0 past
  // nranks. weftd makes every rank's heap at the first attach, so the first rank names them all.
  uint32_t gpus[kMaxNodeRanks];
};
static_assert(sizeof(Attach) == 80 + 4 * kMaxNodeRanks, "Attach is a wire struct");

// A GPU's PCI location ("domain:bus:device", gpu::devicePciId's form) as one word and back; 0 (no
// GPU) for a string of another form.
uint32_t packPciId(const std::string& id);
std::string unpackPciId(uint32_t packed);

// Written by weftd. Descriptors: the rank's heap segment, its queue, its staging segment (only
// where weftd runs the engine), then every other rank's heap segment in rank order.
struct Attached {
  uint64_t commId;
  int32_t rank;
  int32_t nranks;
  // 0: the rank runs its engine; 1: weftd does, reading inputs through a staging segment (CPU
  // backend); 2: weftd does, reading inputs where it maps them (GPU backends, MapMemory).
  uint32_t engineInWeftd;
  // Workers of weftd's engine of the rank (engineInWeftd; service_engine_ctas caps the attach's
  // `workers`): the rank cuts its ops for that many; 0 where the rank runs its engine.
  uint32_t engineWorkers;
  uint64_t heapBase;     // the rank's heap in weftd's address space (engineInWeftd)
  uint64_t stagingBase;  // its staging segment in weftd's address space (engineInWeftd)
};
static_assert(sizeof(Attached) == 40, "Attached is a wire struct");

// Written by the library, where weftd runs a GPU engine (Attached::engineInWeftd == 2): one
// allocation of the rank's device memory that an op reads (the engine follows the op's pointers),
// by its IPC handle. Only an attached rank's own connection may send it, and only weftd's own
// user's (the engine runs for no one else).
struct MapMemory {
  unsigned char handle[64];  // gpu::IpcHandle of the allocation
  uint64_t base;             // the allocation's base in the rank's address space
  uint64_t bytes;            // the allocation's size, as the rank's driver reports it
};
static_assert(sizeof(MapMemory) == 80, "MapMemory is a wire struct");

// Written by weftd.
struct MemoryMapped {
  uint64_t address;  // the allocation's base in weftd's address space
};
static_assert(sizeof(MemoryMapped) == 8, "MemoryMapped is a wire struct");

// A whole message as it arrived; owns its descriptors until they are taken.
struct Frame {
  MsgType type{};
  std::vector<uint8_t> body;
  std::vector<int> fds;
  Frame() = default;
  Frame(Frame&& o) noexcept = default;
  Frame& operator=(Frame&& o) noexcept;
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;
  ~Frame();
  void closeFds();
};

// Checks a header; "" if it may be followed (its body is then waited for), else why not.
std::string checkHeader(const Header& h);

// Collects the bytes of one connection and cuts them into frames. Never holds more than one
// header and kMaxBodyBytes.
class FrameReader {
 public:
  FrameReader() = default;
  FrameReader(FrameReader&& o) noexcept { *this = std::move(o); }
  FrameReader& operator=(FrameReader&& o) noexcept;
  FrameReader(const FrameReader&) = delete;
  FrameReader& operator=(const FrameReader&) = delete;
  ~FrameReader();  // closes descriptors of a message never taken

  enum class Result { kNeedMore, kFrame, kBad };
  // How many bytes the reader wants next (at most), so that it never reads past a frame.
  size_t want() const;
  // Takes `n` bytes and the descriptors that arrived with them; bytes past the end of the current
  // frame are not taken (callers read at most want() bytes, so none come).
  void feed(const uint8_t* data, size_t n, std::vector<int>&& fds);
  // kFrame: *out holds the next message. kBad: *why says what was wrong; the connection must go.
  Result next(Frame* out, std::string* why);
  // Whether part of a frame has arrived and the rest has not.
  bool partial() const { return have_ > 0; }

 private:
  Header header_{};
  uint8_t headerBytes_[sizeof(Header)] = {};
  std::vector<uint8_t> body_;
  std::vector<int> fds_;
  size_t have_ = 0;  // bytes of the current frame so far
  std::string bad_;
};

// Body checks: true and *out filled, or false and *why set.
bool decodeHello(const Frame& f, Hello* out, std::string* why);
bool decodeWelcome(const Frame& f, Welcome* out, std::string* why);
bool decodeRefused(const Frame& f, Refused* out, std::string* why);
bool decodeAttach(const Frame& f, Attach* out, std::string* why);
bool decodeAttached(const Frame& f, Attached* out, std::string* why);
bool decodeStatus(const Frame& f, StatusHead* head, std::vector<StatusRow>* rows, std::string* why);
bool decodeMapMemory(const Frame& f, MapMemory* out, std::string* why);
bool decodeMemoryMapped(const Frame& f, MemoryMapped* out, std::string* why);

// The bytes of a message (header and body); descriptors go beside them (socket.hpp).
std::vector<uint8_t> encode(MsgType type, const void* body, size_t bodyBytes, uint32_t fdCount = 0);
// A NUL-terminated copy of `s`, cut to fit.
template <size_t N>
void putText(char (&dst)[N], const std::string& s) {
  const size_t n = s.size() < N - 1 ? s.size() : N - 1;
  for (size_t i = 0; i < n; ++i) dst[i] = s[i];
  for (size_t i = n; i < N; ++i) dst[i] = '\0';
}

}  // namespace weft::service
