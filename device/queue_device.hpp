// Wire format of the work queue: a ring of descriptor slots in shared, pinned host memory, written
// by submitters (any thread, later any process) and executed by the persistent engine. Every field
// names who writes it and who reads it.
//
// Protocol for ticket t (slot t % depth):
//   submitter: t = fetch_add(tail); wait free >= t + 1 - depth; fill desc, status = 0,
//              finished = 0, limit = tag(t) | nitems, claim = tag(t); store ready = t + 1 (release).
//   engine:    poll ready == t + 1 (acquire); workers take items by CAS on claim. Both claim and
//              limit carry the ticket's low 32 bits, so a worker that lags behind (still on ticket
//              t while the slot already holds t + depth) never takes an item of the wrong op and
//              never reads the descriptor a submitter may be rewriting;
//              the worker finishing the last item stores status, done = t + 1 (release) and,
//              unless the submitter waits on the host, free = t + 1; then completed = t + 1.
//   host wait: poll done == t + 1, read status, then store free = t + 1.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft::dev {

constexpr uint64_t kQueueMagic = 0x7765667471756575ull;  // "weftqueu"

enum class OpKind : uint32_t {
  kNop = 0,
  kAllReduce = 1,
  kAllToAll = 2,
  kAllReduceOneShot = 3,
  kGemvAllReduce = 4,  // fused, one-shot exchange of float32 partials
  kGemv = 5,           // the unfused first half: this rank's partials into y
  kEmbeddingAllToAll = 6,
  kGemmAllToAll = 7,  // fused; always a launched kernel on a GPU (it wants the SM's shared memory)
  // The embedding's unfused first half: this rank's bags pooled into a buffer. Never queued and
  // no ticket: the engine runs it just before the embedding op, as a kernel on the caller's stream
  // or on the calling thread, so ranks that take different paths keep their tickets alike.
  kEmbeddingPool = 8,
};

// Result of an op or of a wait. Values are stable: they cross the queue.
enum class Status : uint32_t {
  kOk = 0,
  kTimeout = 1,     // a bounded wait expired
  kAborted = 2,     // weft_comm_abort or destroy
  kPeerFailed = 3,  // another wait of this communicator failed first; see QueueHeader::error
  kBadInput = 4,    // the op found invalid input on the device (an embedding index, send counts)
  kTransport = 5,   // the host proxy's network back-end failed (a dead or unreachable peer)
  kMismatch = 6,    // a peer runs this op with another signature (signature_device.hpp)
};

// What a wait was waiting for, for the failure record.
enum class WaitWhat : uint32_t {
  kNone = 0,
  kInboxData = 1,       // a peer's tile in this rank's inbox
  kInboxCredit = 2,     // a peer to free an inbox slot of this rank's
  kGather = 3,          // a peer's reduced tiles (AllReduce all-gather)
  kReady = 4,           // a peer to be ready to receive (All-to-All)
  kArrival = 5,         // a peer's blocks (All-to-All)
  kQueueSlot = 6,       // the engine to free a queue slot (submitter back-pressure)
  kOpDone = 7,          // the engine to finish an op (host wait)
  kIndex = 8,           // not a wait: an embedding index out of its table (record: table, bag, index)
  kCounts = 9,          // a peer's row of the GEMM + All-to-All route (its send counts)
  kSendCounts = 10,     // not a wait: rank `peer`'s send_counts are negative or do not sum to its tokens
  kExpertOffsets = 11,  // not a wait: rank `peer`'s expert_offsets do not rise to its tokens
  kCapacity = 12,       // not a wait: rank `peer` would receive `observed` rows, capacity `expected`
  kRecvOffset = 13,     // not a wait: rank `peer`'s recv is at heap offset `observed`, rank 0's at `expected`
  kPartial = 14,        // a block of this rank to leave its part of a split GEMM tile (`peer`: the part's range)
  kProxyRoom = 15,      // the host proxy to take triggers from a full ring (`peer`: the trigger's)
  kPeerGone = 16,   // not a wait: rank `peer`'s process (-1: weftd's) of pid `observed` ended (weftd/the rank saw it)
  kExternal = 17,   // a kernel outside weft's engine (weft.h: weft_device_status_t); ticket kExternalTicket
  kSignature = 18,  // a peer's signature word of the op (expected: this rank's word, observed: the peer's)
  kOpKind = 19,     // not a wait: the engine does not run op kind `observed` (a descriptor of another build)
  kHandover = 20,   // the persistent kernel to start an op (observed: the slot's `ready`; host: HandoverGuard)
};

// WaitRecord::ticket of a failure recorded by a kernel outside weft's engine (weft.h).
constexpr uint64_t kExternalTicket = ~uint64_t{0};

// The arguments of the ops that take more than OpDesc's common fields, as the descriptor carries
// them: one struct per op kind (each op's header unpacks them into its typed view, e.g.
// EmbeddingArgs). Addresses are in the engine's address space, like OpDesc::send.
struct OneShotOpArgs {  // kAllReduceOneShot
  uint64_t lines;       // nonzero: the 128-byte lines' wire format (allreduce_oneshot_device.hpp)
};
struct AllToAllOpArgs {  // kAllToAll
  uint64_t staged;       // nonzero: through the one-shot exchange's scratch (alltoall_device.hpp)
};
struct GemvOpArgs {  // kGemvAllReduce, kGemv: y[batch, n] = x[batch, k] . w[n, k]^T; x is OpDesc::send
  uint64_t w;        // [count, k]
  uint64_t batch;    // rows of x
  uint64_t k;        // columns of x and w (this rank's share)
  uint64_t owners;   // nonzero: each slice's owner reduces it (the fused rsag path)
};
struct EmbeddingOpArgs {                                      // kEmbeddingAllToAll; the weights are OpDesc::send
  uint64_t tableOffsets, indices, offsets, perSampleWeights;  // int64_t*, int64_t*, int64_t*, float*
  uint64_t numTables;                                         // tables of this rank
  uint64_t localBatch;                                        // samples per rank
  uint64_t totalTables;                                       // tables of every rank
  uint64_t tableBase;                                         // this rank's first table among them
  uint64_t flags;                                             // EmbeddingAllToAllOp::kFlagMean | kFlagCheck
  // The unfused path: where kEmbeddingPool put every bag, [dest][sample][table][dim] in the
  // engine's address space, and where the All-to-All's items copy them from; 0: pooled in place.
  uint64_t pooled;
};
struct GemmOpArgs {     // kGemmAllToAll; the tokens are OpDesc::send
  uint64_t w;           // [experts, k, count]
  uint64_t sendCounts;  // int64_t[nranks]
  uint64_t recvCounts;  // int64_t[nranks], written by the op; 0: none
  uint64_t tokens, k;
  uint64_t capacity;  // rows each rank's recv holds
  uint64_t experts;
  uint64_t expertEnds;  // int64_t[experts]: each expert's end row among the tokens
  uint64_t partials;    // float*: the split last wave's partial tiles; 0: no split
  uint64_t split;       // the split's tiles (low 32 bits) and grid (high 32 bits)
};
union OpArgs {
  uint64_t words[10];  // first: `OpDesc d{}` zeroes all of them
  OneShotOpArgs oneShot;
  AllToAllOpArgs allToAll;
  GemvOpArgs gemv;
  EmbeddingOpArgs embedding;
  GemmOpArgs gemm;
};
static_assert(sizeof(OpArgs) == 80, "OpArgs is part of a wire struct");

// Written by the submitter before `ready`; read-only for the engine. Everything in it is fixed
// when the op is submitted (or captured into a graph): the protocol counters that change from op
// to op are on the device (OpCounters).
struct OpDesc {
  uint32_t kind;   // OpKind
  uint32_t dtype;  // DType
  uint64_t count;  // AllReduce: elements; All-to-All: elements per rank; GEMV: rows of w; GEMM: columns
  uint64_t send;   // input address in the engine's address space
  uint64_t recv;   // output offset in the symmetric heap
  // How the submitter cut the op into items, in the op's own unit: elements per tile (AllReduce,
  // All-to-All), compute items (GEMV), bags per item (embedding), column tiles (GEMM).
  uint32_t grain;
  uint32_t nitems;      // work items, claimed in order by the workers
  OpArgs args;          // the op's own, by `kind`
  uint32_t sig;         // what the ranks must agree on (signature_device.hpp); 0: not checked
  uint32_t countItems;  // launched engine: nonzero to count the items in EngineControl::itemsFinished
};
static_assert(sizeof(OpDesc) == 128, "OpDesc is a wire struct");
static_assert(offsetof(OpDesc, args) == 40 && offsetof(OpDesc, sig) == 120, "OpDesc's layout is fixed");

constexpr uint32_t kSlotHostWaits = 1u;  // the submitter frees the slot after reading status

struct alignas(64) QueueSlot {
  uint64_t ready;     // submitter writes t + 1 (release); engine reads
  uint64_t claim;     // submitter resets to (t << 32); workers CAS (ticket tag << 32 | next item)
  uint64_t limit;     // submitter: (t << 32) | desc.nitems; workers read
  uint64_t finished;  // submitter resets to 0; workers add 1 per item done
  uint64_t done;      // engine writes t + 1 (release) after status; host or stream waits on it
  uint64_t free;      // engine or host writes t + 1 when the slot may take ticket t + depth
  uint32_t status;    // submitter resets; workers record the first failure (Status)
  uint32_t flags;     // submitter: kSlotHostWaits
  uint64_t pad;
  OpDesc desc;
};
static_assert(sizeof(QueueSlot) == 192, "QueueSlot is a wire struct");

// Where the first failing wait of a communicator was; written once, by the wait that set `error`.
struct WaitRecord {
  uint64_t ticket;    // op
  uint32_t item;      // work item (tile) of the op
  int32_t peer;       // rank waited on, -1 for none
  uint32_t what;      // WaitWhat
  uint32_t status;    // Status
  uint64_t expected;  // value waited for (at least)
  uint64_t observed;  // value last seen
};
static_assert(sizeof(WaitRecord) == 40, "WaitRecord is a wire struct");

struct alignas(64) QueueHeader {
  uint64_t magic;  // creator
  uint32_t depth;  // creator: number of slots
  uint32_t reserved0;
  // A failure a host thread records (a host-side wait, the peer watch, the proxy, weftd) is
  // claimed here, among host threads alone, and only then made visible in `error` by a plain
  // store. Kernels claim `error` by compare-and-swap, and a CAS is atomic between the CPU and a
  // GPU on PCIe only where the platform has native host atomics (CUDA's
  // cudaDevAttrHostNativeAtomicSupported): both sides could otherwise win and write one record.
  uint32_t hostError;        // host threads: CAS from 0 to the Status
  uint32_t hostRecordValid;  // set (release) once `hostRecord` is written
  WaitRecord hostRecord;
  alignas(64) uint64_t tail;       // submitters: fetch_add for a ticket
  alignas(64) uint64_t completed;  // engine: ops completed, in ticket order
  alignas(64) uint32_t stop;       // host: the engine must exit (destroy)
  uint32_t abort;                  // host: weft_comm_abort; every wait gives up
  uint32_t error;                  // the first failure's Status (sticky): claimed by kernels' CAS
  uint32_t recordValid;            // set (release) once `record` is written (by the claimer)
  WaitRecord record;
};
static_assert(sizeof(QueueHeader) == 256, "QueueHeader is a wire struct");
static_assert(offsetof(QueueHeader, tail) == 64, "the host's failure words fill the first line");

}  // namespace weft::dev
