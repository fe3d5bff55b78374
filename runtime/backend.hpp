// What differs between the CPU backend and a GPU backend: where the heap lives and how peers map
// it, how the engine runs, and how an op is handed to it. One implementation is compiled per build
// (backend_cpu.cpp, or backend_gpu*.cpp for CUDA and HIP); the rest of the runtime is shared.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap.hpp"
#include "device/comm_device.hpp"
#include "transport/path.hpp"
#include "transport/proxy/proxy.hpp"
#include "work_queue.hpp"

namespace weft {

// A word of the engine's control block that the host raises (Engine::raise).
using ControlWord = uint32_t dev::EngineControl::*;

// This rank's heap segment, and every peer's as this process reaches it (transport/): mapped, or
// through the host proxy.
class HeapMemory {
 public:
  // Collective over the bootstrap. The segment's first `controlBytes` read as zero.
  // Throws weft::Error.
  HeapMemory(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes, uint64_t controlBytes,
             const transport::ProxyOptions& proxy);
  // Over segments another process made (weftd), each `bytes` long: fds[r] is rank r's descriptor
  // (the caller's; mapped here, then no longer needed). Every peer is mapped (service mode serves
  // one node). CPU backend: shared memory; GPU backends: device memory (transport/p2p,
  // DeviceSegment), each rank's on its own GPU. Throws weft::Error.
  HeapMemory(int rank, const std::vector<int>& fds, uint64_t bytes);
  ~HeapMemory();
  HeapMemory(const HeapMemory&) = delete;
  HeapMemory& operator=(const HeapMemory&) = delete;

  // Base of rank r's segment in this process (a device address on a GPU backend).
  uint8_t* base(int rank) const;
  // [nranks + 1]: the bases, then the proxy's device view (or null), in memory the engine can read.
  uint8_t* const* engineBases() const;
  // The host proxy, or null where every peer is mapped.
  transport::Proxy* proxy() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Service mode, in weftd: one rank's heap segment, made to be passed by descriptor. CPU backend:
// shared memory with no name (memfd); GPU backends: device memory on the rank's GPU
// (transport/p2p, DeviceSegment), which weftd maps for every GPU that reaches it.
class ServedHeap {
 public:
  // `gpuPciId`: the rank's GPU (gpu::devicePciId's form; "" on the CPU backend). The first
  // `zeroBytes` (the control area) read as zero. *fd receives the descriptor (the caller's to
  // close). Throws weft::Error, kInvalidUsage where the backend cannot make this kind of heap.
  ServedHeap(const std::string& gpuPciId, uint64_t bytes, uint64_t zeroBytes, const std::string& what, int* fd);
  ~ServedHeap();
  ServedHeap(const ServedHeap&) = delete;
  ServedHeap& operator=(const ServedHeap&) = delete;

  // Where weftd sees the segment (a device address on a GPU backend).
  uint8_t* data() const;
  uint64_t size() const;
  // Raises the engine's `error` word (the first failure, dev::EngineControl) in the segment's
  // control area to `status` where it is still 0, so that the rank's engine stops waiting. On a
  // GPU the store is a copy, bounded by a second.
  void failEngine(uint32_t status);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Service mode, in weftd: the engine of one rank over memory weftd made (the rank's queue, every
// rank's heap). CPU backend: worker threads (dev::CpuEngine); GPU backends: the persistent kernel
// on the rank's GPU (Engine), which reads the rank's inputs where weftd maps them (mapInput).
class ServedEngine {
 public:
  // `view`: the rank's, in weftd's addresses, its `heap` a host array of every rank's base then
  // null; `gpuPciId`: the rank's GPU ("" on the CPU backend); `sharers`: ranks of the
  // communicator on that GPU (each kernel takes its share of the blocks); `idleNs`: how long the
  // GPU kernel waits on an empty queue before it leaves the GPU (0: never; the rank's next op
  // then asks for it again, wake). Threads on the CPU backend never leave. Throws weft::Error.
  ServedEngine(const dev::CommView& view, WorkQueue& queue, int workers, uint64_t idleNs, const std::string& gpuPciId,
               int sharers);
  ~ServedEngine();
  ServedEngine(const ServedEngine&) = delete;
  ServedEngine& operator=(const ServedEngine&) = delete;

  // Raises `words` (stop, abort) of the engine's control block, where its workers look; the
  // caller raises the queue's stop word too. Never waits on the workers.
  void raise(std::initializer_list<ControlWord> words);
  // Waits for the workers to leave, after raise (weftd's reaper thread). Bounded on a GPU (10 s);
  // returns false where a kernel did not stop (the caller must keep what it may touch). What the
  // engine mapped goes with it (the destructor), which weftd runs only once no kernel of its
  // runs on any GPU (CommRegistry::reclaim).
  bool join();
  // Whether the engine's GPU kernel is on the GPU (it has not left on idle, or stopped). Never on
  // the CPU backend.
  bool running();
  // Starts the GPU kernel again if every worker has left on idle (the rank found none alive after
  // publishing an op). A launch that fails becomes the engine's fault.
  void wake();
  // What made the engine fail on its own ("" while it has not): on a GPU, the persistent
  // kernel's fault (an illegal address, say), after which it serves nothing more. Cheap: weftd's
  // loop asks every turn.
  std::string fault();
  // GPU backends: maps an allocation of the rank's device memory into weftd (`handle`, its IPC
  // handle; [base, base + bytes) in the rank) and returns its base here. A mapping the new one
  // overlaps was freed in the rank: it is retired, and closed by closeRetired. Returns 0 where
  // the driver refuses the handle while such a retired mapping is still open (an allocation at
  // the same address can be "already mapped" until it is closed) and `mayDefer`: the caller asks
  // again after closeRetired. Throws weft::Error: kInvalidUsage on the CPU backend or past the
  // engine's limit of mappings, kInvalidArgument where the handle cannot be opened.
  uint64_t mapInput(const unsigned char (&handle)[64], uint64_t base, uint64_t bytes, bool mayDefer);
  // Whether mappings are retired and not yet closed.
  bool holdsRetired() const;
  // The GPU it runs on (-1 on the CPU backend).
  int device() const;
  // Closes the retired mappings. Only while no kernel of this process runs on any GPU: closing
  // waits for them to end (CommRegistry::reclaim).
  void closeRetired();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The allocation of this process's device memory that holds `ptr`, as another process maps it
// (service mode with weftd's GPU engine): its base and size, the driver's id of the allocation
// (never shared by a later one at the same address) and its IPC handle. Throws weft::Error
// (kInvalidArgument naming `arg`) where the memory cannot be exported so, and kNotSupported on
// the CPU backend.
struct DeviceAllocation {
  uint64_t base = 0, size = 0, id = 0;
  unsigned char handle[64] = {};
};
DeviceAllocation deviceAllocationOf(const void* ptr, const char* arg);

// A GEMV's operands: y[batch, n] = x[batch, k] . w[n, k]^T, row-major, in `dt`.
struct GemvOperands {
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;
  uint64_t batch = 0, n = 0, k = 0;
  dev::DType dt = dev::DType::kFloat32;
};

// A GEMM's operands: out[tokens, h] = a[tokens, k] . w[k, h], row-major, in `dt`.
struct GemmOperands {
  const void* a = nullptr;
  const void* w = nullptr;
  uint64_t tokens = 0, k = 0, h = 0;
  dev::DType dt = dev::DType::kBFloat16;
};

// The engine of one communicator, and how ops reach it.
//   CPU:                worker threads poll the queue; the caller waits on the host.
//   GPU, "launched":    each op is a kernel on the caller's stream (the default: nothing stays
//                       resident in the caller's process).
//   GPU, "persistent":  a resident kernel polls the queue; the caller's stream writes `ready` and
//                       waits on `done` (for weftd/MPS, or processes that load CUDA modules
//                       eagerly: see docs/design-notes.md).
class Engine {
 public:
  // Starts the engine over `view` (whose queue lives in `queue`); mode is the `engine` setting, or
  // "weftd": weftd serves the queue (its CPU workers, or on a GPU its persistent kernel) and this
  // engine only submits (on a GPU it also runs the ops that are kernels of the caller's), or
  // "served" (GPU, in weftd): weftd's persistent engine for a rank of another process.
  // `deviceSharers` ranks of the job use this rank's device (deviceKey): each op kernel then takes
  // at most that share of the blocks the device holds at once, so that the sharers' kernels, whose
  // blocks wait on each other, all fit side by side (under MPS). `proxied`: the communicator has a
  // host proxy, so a GPU runs the kernels whose device code posts to it.
  Engine(const dev::CommView& view, WorkQueue& queue, int workers, const std::string& mode, int deviceSharers,
         bool proxied);
  // Stops the engine (the caller has set the queue's stop word) and completes, as aborted, every op
  // it had not finished, so that no stream waits on it forever. Returns false where the device may
  // still use the communicator's memory (a kernel that did not stop, ops still running on the
  // caller's streams): the caller must then leak the heap and the queue, since unmapping them under
  // a running kernel would fault the GPU. Idempotent; the destructor calls it.
  bool stop();
  ~Engine();
  // Mode "weftd" on a GPU: weftd's kernel leaves the GPU when the queue has been idle for a while,
  // and an op published after it left would wait for good. `wake` asks weftd to start it again;
  // enqueue calls it where it finds no worker alive once the op is published (the same handshake
  // as the persistent engine's own relaunch). It throws weft::Error where weftd cannot be told.
  void setWake(std::function<void()> wake);
  // The persistent engine: whether its kernel is still on the GPU after waiting at most `waitS`
  // for it to leave; starts it again where every worker has left on idle (weftd, for a rank's
  // wake). Throws weft::Error if the launch fails.
  bool kernelRunning(double waitS = 0);
  void restartIfIdle();
  // The persistent engine in the caller's process: an op its kernel has not started `limitNs`
  // after it became the oldest unfinished one fails the communicator, and its stream is released
  // (runtime/handover_guard.hpp: a stream held behind the resident kernel never hands it over).
  // Other engines have no such handover to bound: nothing happens.
  void boundHandovers(uint64_t limitNs);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Hands op `ticket` to the engine, ordered on `stream`. Called in ticket order (under the
  // communicator's submit lock), so it must not wait for the op itself.
  dev::Status enqueue(uint64_t ticket, const dev::OpDesc& desc, void* stream, uint64_t timeoutNs);
  // CPU: waits for the op (bounded by engine progress) and returns its outcome. GPU: returns at once.
  dev::Status finish(uint64_t ticket, uint64_t stallNs);
  // Waits, at most `seconds`, until the GPU has finished every op handed to the engine (CPU: the
  // queue tracks that itself). Returns false if it had not by then.
  bool quiesce(double seconds);
  // Sets words of the engine's control block (abort, stop, error) to 1 where the engine reads
  // them: on a GPU one drain, bounded by a second, for all of them. Safe from any thread; never
  // waits behind the caller's streams.
  void raise(std::initializer_list<ControlWord> words);
  // The launched GPU engine counts the items its eager ops finish, all ops together, on the device
  // (EngineControl::itemsFinished); this reads the count, waiting at most `seconds` for the copy.
  // nullopt where the engine does not count (the persistent engine: its queue slots say how far
  // each op is; the CPU engine: its host waits see their ops) or the copy did not complete in
  // time. For the status watch, which alone calls it, always from its one thread.
  std::optional<uint64_t> itemsFinished(double seconds);
  // Whether `desc` runs as a kernel of this process of its own (with this process's pointers)
  // rather than in the engine that serves the queue: the GEMM beside a persistent kernel (its
  // tiles need more shared memory than a worker has), and under weftd's engine the GEMV (its
  // speed is the loads in flight on every SM). Never on the CPU backend.
  bool runsAlone(const dev::OpDesc& desc) const;
  // The persistent kernel's fault, "" while it has none (and for every other engine).
  std::string kernelFault();
  // Whether itemsFinished counts (the launched GPU engine).
  bool countsItems() const;
  // The items `desc` runs as, which itemsFinished counts for it (the GEMM's split adds some).
  uint32_t itemsOf(const dev::OpDesc& desc) const;
  // Adds the op to the graph `stream` is capturing: at each replay it runs in graph order and reads
  // the engine's protocol counters then (they live on the device). The queue never sees it.
  void capture(const dev::OpDesc& desc, void* stream);
  // The GEMV + AllReduce's `blas` path: the vendor BLAS's GEMV on `stream` (or into the graph it
  // is capturing), ordered after the engine's earlier ops as an op of its own would be. Returns
  // false, having done nothing, where this engine has no vendor BLAS (the CPU engine, the persistent
  // engine, weftd's for an eager op, HIP builds) or the BLAS cannot take the shape; throws weft::Error if the BLAS
  // fails. Called under the communicator's submit lock.
  bool vendorGemv(const GemvOperands& g, void* stream, bool capturing);
  // The GEMM + All-to-All's blas path: the vendor BLAS's GEMM of `g` into the engine's product
  // buffer (grown as needed and kept until the engine stops, since captured graphs address it),
  // ordered as vendorGemv orders its GEMV; returns the buffer for the op to route, or null, having
  // done nothing, where vendorGemv would return false. The CPU engine has no vendor BLAS; it
  // multiplies on the calling thread (its ops are complete when their calls return) in the fused
  // op's summation order, so that the path runs, and is tested, on every backend. Called under
  // the communicator's submit lock.
  const void* vendorGemm(const GemmOperands& g, void* stream, bool capturing);
  // The embedding's unfused path: pools every bag of `pool` (an embedding op's descriptor of kind
  // kEmbeddingPool) into the engine's buffer of pooled vectors, grown to `bytes` as needed and kept
  // until the engine stops (captured graphs address it, as the GEMM's product), which it returns
  // and `pool` names. Ordered as vendorGemv orders its GEMV: a launched kernel on `stream` (or in
  // the graph it captures), on the CPU the calling thread; no ticket, so the ranks' tickets stay
  // alike whichever path each takes. Returns null, having done nothing, where vendorGemv would
  // return false for want of an engine of this process's (the persistent engine, weftd's).
  // Called under the communicator's submit lock.
  void* poolEmbedding(dev::OpDesc& pool, uint64_t bytes, void* stream, bool capturing);
  // Checks `stream` before anything is published (throws kInvalidArgument); returns whether it is
  // capturing a graph.
  static bool checkStream(void* stream);
  // Whether the one-shot AllReduce's 128-byte lines hold between this process's device and its
  // local peers (device/ll128_device.hpp): always on the CPU; on a GPU where it has an active
  // NVLink (a warp's 128-byte store is not split on the way; over PCIe nothing says so).
  static bool linesSafe();
  // How many worker groups run an op of `kind` at once. The ops whose items are streams (the
  // embedding op's bags, the GEMV's slices) cut their work into about this many items, one per
  // group, so that no group waits on a barrier between items.
  int groupsFor(dev::OpKind kind) const;
  // Where the device addresses `host`, a word of the work queue (the same address on the CPU
  // backend, and wherever the device uses host pointers for registered memory).
  void* queueOnDevice(void* host) const;
  // One line for logs: which device, how ops run.
  std::string describe() const;
  // What names this process's device among the host's ("" on the CPU backend: no device).
  static std::string deviceKey();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One line: the devices this backend would run on (for weftctl).
std::string deviceSummary();
// The model of this process's device as the path table names it: the device's name with each
// blank as '_' ("NVIDIA_H100_80GB_HBM3"), "cpu" on the CPU backend, "" where no device answers.
std::string gpuModel();
// Waits, at most `seconds`, for the work this process gave its device on the default stream and
// every other (weftctl tune measure times ops this way); throws weft::Error on a device fault or
// expiry. The CPU backend's ops end before they return: nothing to wait for.
void deviceSynchronize(double seconds);
// Makes device `index` modulo the host's devices this process's current one, as launchers do with
// the local rank (nothing on the CPU backend). Throws weft::Error where there is none.
void selectDevice(int index);
// Copies `bytes` from host memory into device memory (the heap, or memory the device allocated).
void copyToDevice(void* dst, const void* src, uint64_t bytes);

}  // namespace weft
