// What differs between the CPU backend and a GPU backend: where the heap lives and how peers map
// it, how the engine runs, and how an op is handed to it. One implementation is compiled per build
// (backend_cpu.cpp, or backend_gpu.cpp for CUDA and HIP); the rest of the runtime is shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap.hpp"
#include "device/comm_device.hpp"
#include "transport/path.hpp"
#include "work_queue.hpp"

namespace weft {

// This rank's heap segment and every p2p peer's, mapped into this process.
class HeapMemory {
 public:
  // Collective over the bootstrap. The segment's first `controlBytes` read as zero.
  // Throws weft::Error (kNotSupported for proxy peers, which need the proxy transport).
  HeapMemory(Bootstrap& boot, const std::vector<transport::Path>& paths, uint64_t bytes, uint64_t controlBytes);
  ~HeapMemory();
  HeapMemory(const HeapMemory&) = delete;
  HeapMemory& operator=(const HeapMemory&) = delete;

  // Base of rank r's segment in this process (a device address on a GPU backend).
  uint8_t* base(int rank) const;
  // [nranks] bases, in memory the engine can read.
  uint8_t* const* engineBases() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The persistent engine of one communicator, and how ops reach it.
class Engine {
 public:
  // Starts the engine over `view` (whose queue lives in `queue`).
  Engine(const dev::CommView& view, WorkQueue& queue, int workers);
  // Stops the engine (the caller has set the queue's stop word) and completes, as aborted, every op
  // it had not finished, so that no stream waits on it forever.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Hands the op in `ticket` (published, `ready` not yet set) to the engine, ordered on `stream`.
  // CPU: stream must be NULL; returns the op's outcome. GPU: returns once enqueued.
  dev::Status submit(uint64_t ticket, void* stream, uint64_t stallNs);
  // Whether ops are waited for by the host (the slot is then freed by the submitter).
  static bool hostWaits();
  // Checks `stream` before anything is published; throws kInvalidArgument or kNotSupported.
  static void checkStream(void* stream);
  // One line for weftctl/logs: which device, how many workers.
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One line: the devices this backend would run on (for weftctl).
std::string deviceSummary();

}  // namespace weft
