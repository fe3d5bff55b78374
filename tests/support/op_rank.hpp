// One rank of an op suite that runs on every backend (tests/ops/): its communicator, where its ops
// are ordered, and its buffers in the backend's memory. Each suite is one source compiled into
// weft_cpu_tests (host memory; an op is done when its call returns) and into weft_gpu_tests
// (device memory; ops run on a stream), as UCX's tests are parametrized by memory type. The two
// sides are tests/cpu/op_rank_cpu.cpp and tests/gpu/op_rank_gpu.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "weft/weft.h"

namespace weft::test {

// Where a case runs: how many ranks and, on GPUs, which engine ("launched" or "persistent"; empty
// on the CPU backend, which has one).
struct Placement {
  int ranks = 1;
  std::string engine;
};
// For GoogleTest's messages and CTest's names: "2 ranks", "2 ranks, persistent engine".
void PrintTo(const Placement& placement, std::ostream* os);

// The placements of the backend: 1-4 ranks on the CPU; 1, 2 and 4 GPUs under each engine.
std::vector<Placement> backendPlacements();
// Those of `ranks` ranks (the GPU's under each engine).
std::vector<Placement> backendPlacements(std::vector<int> ranks);
// "2ranks" on the CPU, "2gpus_launched" on GPUs.
std::string placementName(const ::testing::TestParamInfo<Placement>& info);

// Why `placement` cannot run on this machine (a GPU suite without GPUs), or empty.
std::string cannotRun(const Placement& placement);

// The fixture of the suites in tests/ops/: SetUp skips what this machine cannot run and applies
// the engine (read at init, in each rank's process).
class OnEveryBackend : public ::testing::TestWithParam<Placement> {
 protected:
  void SetUp() override;
  int ranks() const { return GetParam().ranks; }
};

// kOnGpu: the few cases too large for the CPU engine's suite run on GPUs only.
// The CPU suites' instances are Ranks/Suite.Case/2ranks (CTest's proxy runs select Ranks/*), the
// GPU ones Gpus/Suite.Case/2gpus_launched.
#ifdef WEFT_TEST_ON_GPU
#define WEFT_BACKEND_PREFIX Gpus
constexpr bool kOnGpu = true;
#else
#define WEFT_BACKEND_PREFIX Ranks
constexpr bool kOnGpu = false;
#endif
#define WEFT_INSTANTIATE_ON_EVERY_BACKEND(suite, ...)                                         \
  INSTANTIATE_TEST_SUITE_P(WEFT_BACKEND_PREFIX, suite,                                        \
                           ::testing::ValuesIn(::weft::test::backendPlacements(__VA_ARGS__)), \
                           ::weft::test::placementName)

struct OpRank {
  weft_comm_t comm = nullptr;
  void* stream = nullptr;  // the stream its ops run on; null on the CPU backend
  void* heap = nullptr;    // in the symmetric heap: the ops' outputs
  void* input = nullptr;   // as many bytes in the backend's ordinary memory: the ops' inputs
};

// A communicator of `ranks` for `rank` with `bytes` of heap and of input (a test failure, and a
// null comm, where init fails); closeRank finalizes and frees it all; closeFailedRank, for a
// communicator whose op failed, destroys it without the finalize barrier, as a job that saw an op
// fail would.
OpRank openRank(int rank, int ranks, const weft_unique_id_t& id, size_t bytes, const weft_config_t* config = nullptr);
void closeRank(OpRank& r);
void closeFailedRank(OpRank& r);

// Waits for the ops `r` has issued (its stream on a GPU; nothing to wait for on the CPU), then
// asks the communicator whether any of them failed: an op that timed out completes (its stream
// goes on) with its output unwritten, and says so only here, not as wrong data.
::testing::AssertionResult finish(const OpRank& r);
// Whether every op issued on `comm` so far succeeded (weft_comm_get_async_error), with its text.
::testing::AssertionResult opsSucceeded(weft_comm_t comm);

// Host bytes into the backend's memory (input or heap) and back; poisoned bytes have every bit set.
void upload(void* dst, const void* src, size_t bytes);
inline void upload(void* dst, const std::vector<uint8_t>& src) { upload(dst, src.data(), src.size()); }
std::vector<uint8_t> download(const void* src, size_t bytes);
void poisonBytes(void* dst, size_t bytes);

// Copies of host vectors in the backend's ordinary memory, freed together (null for an empty one).
class BackendCopies {
 public:
  BackendCopies();
  ~BackendCopies();
  BackendCopies(const BackendCopies&) = delete;
  BackendCopies& operator=(const BackendCopies&) = delete;
  template <typename T>
  T* copy(const std::vector<T>& host) {
    return static_cast<T*>(copyBytes(host.data(), host.size() * sizeof(T)));
  }

 private:
  void* copyBytes(const void* src, size_t bytes);
  std::vector<void*> buffers_;
};

}  // namespace weft::test
