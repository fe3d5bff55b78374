// GPU test helpers: how many GPUs the machine has (read without initialising CUDA, so the parent
// can still fork ranks), device buffers, and the CHECK for CUDA calls.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "support/op_rank.hpp"
#include "weft/weft.h"

#define WEFT_CUDA_OK(call)                                                 \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)

namespace weft::test {

// Counts /dev/nvidiaN; CUDA must not be initialised before fork.
int gpusPresent();

// Whether ranks may share GPUs (WEFT_TEST_SHARE_GPUS=1, set by scripts/gpu-check.sh -s, which runs
// them under MPS): then a test of n ranks runs on any GPU count, ranks placed round-robin.
bool sharingGpus();

// Skips the test unless `n` ranks have GPUs: n of them, or one at least where ranks share.
#define WEFT_REQUIRE_GPUS(n)                                                                               \
  do {                                                                                                     \
    if (const std::string why_ = ::weft::test::cannotRun(::weft::test::Placement{(n), ""}); !why_.empty()) \
      GTEST_SKIP() << why_;                                                                                \
  } while (0)

// Makes rank `rank` of `n` use its GPU (round-robin): where ranks share GPUs, first gives each
// its share of the SMs under MPS (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, read when CUDA starts in
// the process; a value already set is kept). Without it the sharers' spinning kernels need not
// run side by side, and the fused ops wait for each other until the timeout.
void useGpu(int rank, int n);

// Host bytes to a device pointer (or a symmetric-heap block, host memory in a proxy job) and back.
void toDevice(void* dst, const std::vector<uint8_t>& src);
std::vector<uint8_t> toHost(const void* src, size_t bytes);

// Device copies of host vectors, freed together.
struct DeviceCopies {
  std::vector<void*> buffers;
  DeviceCopies() = default;
  DeviceCopies(const DeviceCopies&) = delete;
  DeviceCopies& operator=(const DeviceCopies&) = delete;
  ~DeviceCopies() {
    for (void* p : buffers) cudaFree(p);
  }
  // Null for an empty vector.
  template <typename T>
  T* copy(const std::vector<T>& host) {
    if (host.empty()) return nullptr;
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    buffers.push_back(p);
    return static_cast<T*>(p);
  }
};

// One rank of a GPU test: its communicator, a stream, an output in the symmetric heap and an
// input in ordinary device memory (both `bytes`).
struct Rank {
  weft_comm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* heap = nullptr;
  void* input = nullptr;
};

// The engine under test: "launched" (default) or "persistent", which needs modules loaded eagerly
// (a lazily loaded kernel can wait for a resident one; see docs/design-notes.md). setUp applies it
// before CUDA starts in the rank's process.
extern std::string gEngine;

Rank setUp(int rank, int n, const weft_unique_id_t& id, size_t bytes, const weft_config_t* config = nullptr);
void tearDown(Rank& r);

// The stream of an op suite's rank (tests/support/op_rank.hpp), for CUDA's calls.
inline cudaStream_t streamOf(const OpRank& r) { return static_cast<cudaStream_t>(r.stream); }

// The work `enqueue` puts on `s`, captured into an executable graph (null, with a test failure, if
// capture or instantiation failed). The caller destroys it with cudaGraphExecDestroy.
cudaGraphExec_t captureGraph(cudaStream_t s, const std::function<void()>& enqueue);

// Kernels used to interleave the caller's own work with weft ops on one stream.
void launchScale(float* out, const float* in, float factor, size_t n, cudaStream_t s);
void launchFill(float* out, float value, size_t n, cudaStream_t s);
// Holds `s` until the mapped host word `open` (its device address) is nonzero, at most `limitS`.
void launchGate(const uint32_t* open, double limitS, cudaStream_t s);

}  // namespace weft::test
