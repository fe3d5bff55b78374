// One communicator: bootstrap, symmetric heap, work queue and the persistent engine of one rank.
// Thread safety: ops and abort may be called from any thread; memAlloc/memFree/finalize are
// collective and must not run concurrently with each other on one communicator.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend.hpp"
#include "bootstrap.hpp"
#include "common/error.hpp"
#include "common/process.hpp"
#include "config.hpp"
#include "device/dtype_device.hpp"
#include "device/ops/embedding/embedding_args.hpp"
#include "device/ops/gemm/gemm_args.hpp"
#include "device/queue_device.hpp"
#include "device/signature_device.hpp"
#include "heap.hpp"
#include "path_table.hpp"
#include "status_page.hpp"
#include "status_watch.hpp"
#include "topology.hpp"
#include "work_queue.hpp"

namespace weft {

namespace service {
class Client;
class Staging;
class WeftdInputs;
}  // namespace service

// oneshot_protocol as a threshold on the bytes a one-shot AllReduce sends (input x peers).
constexpr uint64_t kLinesAlways = 0, kLinesNever = UINT64_MAX;

// What kernels outside weft's engine need (weft.h: weft_comm_get_device_view).
// The API's code for a status that names a kind of failure (or success); none for the others
// (a peer's failure, an unknown status): callers say what those mean where they are.
std::optional<Code> codeOfKind(dev::Status st);

struct ExternalView {
  const std::vector<void*>* bases;  // [nranks]: every rank's heap segment in this address space
  uint64_t heapBytes;               // each segment's size, the control area included
  uint64_t timeoutNs;
  dev::QueueHeader* status;  // host memory mapped into the device: stop, abort, error, record
  void* statusOnDevice;      // &status->stop where the device addresses it
};

class Comm {
 public:
  // Collective. Throws weft::Error.
  static std::unique_ptr<Comm> create(const UniqueId& id, int rank, int nranks, const Settings& settings);
  ~Comm();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const Settings& settings() const { return settings_; }
  // What the path table's rows are matched against: the GPU model, ranks and ranks per GPU.
  const Placement& pathPlacement() const { return pathPlacement_; }

  // Collective; throws kOutOfMemory / kInvalidUsage (ranks disagree).
  void* memAlloc(uint64_t bytes);
  void memFree(void* p);

  // Stream-ordered ops. Arguments are already checked for NULL, range and dtype by the API layer;
  // these check heap placement and the stream and throw kInvalidArgument naming the argument.
  // CPU backend: returns when the op is complete, throwing kTimeout / kAborted if it failed.
  // GPU backends: returns once enqueued; a failure shows in asyncError.
  Code allReduce(const void* send, void* recv, uint64_t count, dev::DType dt, void* stream);
  Code allToAll(const void* send, void* recv, uint64_t countPerRank, dev::DType dt, void* stream);
  // y[batch, n] = sum over ranks of x[batch, k] . w[n, k]^T; y in the heap, batch 1..64.
  Code gemvAllReduce(const void* x, const void* w, void* y, uint32_t batch, uint64_t n, uint64_t k, dev::DType dt,
                     void* stream);
  // Pools this rank's tables' bags of the global batch and stores each vector into its sample's
  // owner rank's recv (weft.h has the layout). `a` holds device pointers and sizes, checked by the
  // C boundary; recv must be in the heap.
  Code embeddingAllToAll(const dev::EmbeddingArgs& a, void* recv, dev::DType dt, void* stream);
  // out = a @ w (per expert), each row stored into its destination's recv (weft.h has the layout).
  // `g` holds device pointers and sizes, checked by the C boundary; recv must be in the heap.
  Code gemmAllToAll(const dev::GemmArgs& g, void* recv, dev::DType dt, void* stream);

  // From any thread: every wait gives up, the engine stops within a millisecond or so.
  void abort();
  // Waits for the ops in flight, then a barrier with every rank. Collective.
  void finalize();
  // Throws kNotSupported naming the first peer reached through the host proxy (no mapping here).
  ExternalView externalView() const;
  // kSuccess, or the first failure (sticky) and its description.
  Code asyncError(std::string* message) const;

 private:
  Comm(int rank, int nranks, const Settings& s);
  // The status page (status_pages), named after the unique id so that every rank's page carries
  // the same communicator id. Without one (a directory it may not use), the job runs on. On a GPU
  // backend the status watch reads the engine's progress into it every `watchInterval` (0: never).
  void startStatusPage(const UniqueId& id, const std::string& dir, std::chrono::milliseconds watchInterval);
  // Embedded mode with status pages: watches the processes of the p2p peers on this host
  // (peers[r]; pid 0 for the others), so that one that ends without destroying the communicator
  // fails its ops at once.
  void startPeerWatch(std::vector<ProcessIdentity> peers, const UniqueId& id, const std::string& dir);
  // Throws the sticky failure of an earlier op, if any.
  void requireHealthy() const;
  // What the first failure was: the proxy's fault, or the failing wait's record.
  std::string failureText() const;
  // The op's signature for OpDesc::sig (device/signature_device.hpp), or 0 where check_signatures
  // is off.
  uint32_t signature(dev::SigOp op, dev::DType dt, uint32_t shapeHash, uint32_t offsetHash) const;
  // Hands the op to the engine, or into the graph `stream` is capturing. `bytes`: what it writes
  // on this rank (for the status page).
  Code submit(const dev::OpDesc& desc, uint64_t bytes, void* stream, bool capturing);
  // submit's work, with the descriptor as the engine reads it. `first`, if given, runs under the
  // submit lock right before the op is queued (or captured), on the descriptor that will be: no
  // other op of the communicator comes between them.
  Code submitHere(const dev::OpDesc& desc, uint64_t bytes, void* stream, bool capturing,
                  const std::function<void(dev::OpDesc&)>& first = {});
  // The GEMV + AllReduce's blas path: the vendor BLAS's GEMV, where the engine has one (else false).
  bool vendorGemv(const GemvOperands& g, void* stream, bool capturing);
  // The GEMM + All-to-All's blas path: the product rows to route, or null (Engine::vendorGemm).
  const void* vendorGemm(const GemmOperands& g, void* stream, bool capturing);
  // How long the host lets an op make no progress: every wait inside it is bounded by the timeout.
  uint64_t stallNs() const { return 2 * timeoutNs_ + 1000000000ull; }
  uint64_t heapOffset(const void* p, uint64_t bytes, const char* arg) const;
  // Whether an op can move `payloadBytes` per rank through the flagged exchange: at most `limit`
  // (its setting; the scratch holds the larger of the two), with peers, and something to move (an
  // empty exchange would take an epoch without telling any sender that its receiver is done with
  // the scratch).
  bool exchangeFits(uint64_t payloadBytes, uint64_t limit) const;
  // The items of an op over the flagged exchange that would take `items`. Each item waits for its
  // peers' pairs, which through the proxy is a network trip: items past the engine's workers wait
  // in turn, a trip each (a 32 KB one-shot AllReduce on the CPU backend's two workers took eight).
  // Through the proxy, no more items than workers; directly, as many as asked. Ranks need not
  // agree: a pair's flag, not its item, tells its reader it landed.
  uint32_t exchangeItems(uint32_t items) const;
  // Whether the host sees an op end: the CPU engine's ops end before submit returns; a GPU's end on
  // the caller's stream, unseen here.
  static bool hostSeesEnd();
  // An input may be anywhere, but one that touches the heap must lie in one live block.
  void checkInputInHeap(const void* p, uint64_t bytes, const char* arg) const {
    if (heap_->overlaps(p, bytes)) heapOffset(p, bytes, arg);
  }

  const int rank_;
  const int nranks_;
  Settings settings_;
  // Service mode: the connection to weftd, which made the heap and queue (null: embedded). It
  // outlives the engine, so that weftd hears of a clean end only once the engine has stopped.
  std::unique_ptr<service::Client> daemon_;
  // Where weftd runs the engine: how the ops' inputs outside the heap reach it (null otherwise).
  std::unique_ptr<service::Staging> staging_;  // CPU backend
  std::mutex stagingMutex_;
  std::unique_ptr<service::WeftdInputs> weftdInputs_;  // GPU backends
  HostIdentity host_;
  std::unique_ptr<Bootstrap> boot_;
  std::vector<transport::Path> paths_;
  dev::HeapLayout layout_;
  std::unique_ptr<SymmetricHeap> heap_;
  std::vector<void*> peerBases_;  // heap_->base(r) for every rank, for externalView
  std::unique_ptr<WorkQueue> queue_;
  std::unique_ptr<status::Page> page_;       // null where status_pages is 0 or the page could not be made
  std::unique_ptr<StatusWatch> watch_;       // GPU backends with a page: ops end where the host sees nothing
  std::unique_ptr<ProcessWatch> peerWatch_;  // it fails the queue and the engine: goes before them
  std::unique_ptr<Engine> engine_;           // declared last: stops before the queue and heap go
  uint64_t timeoutNs_ = 0;
  uint64_t tileBytes_ = 0;
  // The engine's workers asked for (CPU threads, GPU thread blocks): exchangeItems.
  uint32_t engineWorkers_ = 1;
  uint64_t oneShotMax_ = 0;   // oneshot_max_bytes: the one-shot AllReduce's largest input
  uint64_t gemvScratch_ = 0;  // gemv_scratch_bytes: the fused GEMV's largest partials
  // oneshot_protocol: the one-shot AllReduce sends 128-byte lines from this many bytes sent in all
  // (input x peers); kLinesNever: never.
  uint64_t oneShotLinesFrom_ = kLinesNever;
  bool checkIndices_ = true;
  bool checkSignatures_ = true;  // check_signatures
  PathTable pathTable_;
  Placement pathPlacement_;                // what the table's rows are matched against: the same on every rank
  std::optional<OpPath> gemvForced_;       // the gemv_path setting, unless auto
  std::optional<OpPath> gemmForced_;       // the gemm_path setting, unless auto
  std::optional<OpPath> embeddingForced_;  // the embedding_path setting, unless auto
  bool proxyPeers_ = false;                // some peer is reached through the host proxy (every rank alike)

  // Ticket order is op order, the same on every rank because every rank issues the same ops in the
  // same order (the engine's protocol counters rely on it).
  std::mutex submitMutex_;
  // Held by a GEMM on the blas path from its vendor GEMM to its submit: the engine has one product
  // buffer, and another thread's GEMM must not write it in between.
  std::mutex productMutex_;
};

}  // namespace weft
