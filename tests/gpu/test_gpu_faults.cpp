// Faults on the GPU end with an error, never a hung stream: a peer that never arrives (timeout), a
// peer killed (at once), abort from another thread while the op waits, the same for an op replayed
// from a CUDA graph, a persistent kernel that never gets its op; plus two communicators on one GPU.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gpu_support.hpp"
#include "support/multirank.hpp"
#include "support/oracle.hpp"

namespace weft::test {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Rank 1 never joins; rank 0's stream must still drain, with the comm's async error set. With
// `graph`, rank 0's op is captured into a CUDA graph and replayed.
void lonelyOp(bool abortIt, bool graph = false) {
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    useGpu(rank, n);
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.timeout_s = abortIt ? 30 : 1;
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      WEFT_ASSERT_OK(weft_comm_destroy(comm));
      return;
    }
    cudaStream_t s;
    WEFT_CUDA_OK(cudaStreamCreate(&s));
    float* x = nullptr;
    WEFT_CUDA_OK(cudaMalloc(&x, 1 << 20));
    cudaGraphExec_t exec = nullptr;
    if (graph) {
      exec = captureGraph(s, [&] { WEFT_ASSERT_OK(weft_allreduce(comm, x, y, 1 << 18, WEFT_FLOAT32, s)); });
      ASSERT_NE(exec, nullptr);
      WEFT_CUDA_OK(cudaGraphLaunch(exec, s));
    } else {
      WEFT_ASSERT_OK(weft_allreduce(comm, x, y, 1 << 18, WEFT_FLOAT32, s));
    }
    std::atomic<bool> aborted{false};
    Clock::time_point abortAt{};
    std::thread aborter;
    if (abortIt)
      aborter = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        abortAt = Clock::now();
        aborted = true;
        EXPECT_EQ(weft_comm_abort(comm), WEFT_SUCCESS);
      });
    const auto start = Clock::now();
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const double took = since(start);
    if (aborter.joinable()) aborter.join();
    if (abortIt) {
      EXPECT_LT(std::chrono::duration<double>(Clock::now() - abortAt).count(), 1.0);
    } else {
      EXPECT_GE(took, 0.9);
      EXPECT_LT(took, 3.0);
    }
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    EXPECT_EQ(async, abortIt ? WEFT_ERR_ABORTED : WEFT_ERR_TIMEOUT) << weft_get_last_error(nullptr);
    EXPECT_NE(weft_allreduce(comm, x, y, 16, WEFT_FLOAT32, s), WEFT_SUCCESS) << "a failed communicator is sticky";
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
    if (exec) cudaGraphExecDestroy(exec);
    cudaFree(x);
    cudaStreamDestroy(s);
  };
  EXPECT_TRUE(runRanks(2, body));
}

TEST(GpuFaults, PeerThatNeverArrivesTimesOutAndTheStreamDrains) {
  WEFT_REQUIRE_GPUS(2);
  lonelyOp(false);
}

TEST(GpuFaults, AbortWhileAnOpWaitsReleasesTheStreamWithinOneSecond) {
  WEFT_REQUIRE_GPUS(2);
  lonelyOp(true);
}

// A peer killed while this rank's op waits on the stream: the stream drains at once, long before
// timeout_s (the rank's peer watch sees the process end with its status page left), and the
// failure names the rank.
TEST(GpuFaults, AKilledPeerFailsTheWaitingStreamAtOnce) {
  WEFT_REQUIRE_GPUS(2);
  const std::vector<RankExit> exits = forkRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    useGpu(rank, n);
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.timeout_s = 60;
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 0 waits in its op
      kill(getpid(), SIGKILL);
    }
    cudaStream_t s;
    WEFT_CUDA_OK(cudaStreamCreate(&s));
    float* x = nullptr;
    WEFT_CUDA_OK(cudaMalloc(&x, 1 << 20));
    WEFT_ASSERT_OK(weft_allreduce(comm, x, y, 1 << 18, WEFT_FLOAT32, s));
    const auto start = Clock::now();
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_LT(since(start), 10.0);
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    EXPECT_EQ(async, WEFT_ERR_TRANSPORT) << weft_get_last_error(comm);
    // A p2p peer's end is seen by the rank's peer watch ("rank 1's process ..."); through the
    // host proxy by the proxy's own watch or by the network library, whichever comes first: each
    // names the rank.
    EXPECT_NE(std::string(weft_get_last_error(comm)).find("rank 1"), std::string::npos) << weft_get_last_error(comm);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
    cudaFree(x);
    cudaStreamDestroy(s);
  });
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0);
  EXPECT_FALSE(exits[1].exited);
}

TEST(GpuFaults, TwoCommunicatorsShareEachGpu) {
  WEFT_REQUIRE_GPUS(2);
  weft_unique_id_t second;
  WEFT_ASSERT_OK(weft_get_unique_id(&second));
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    // Comm a launches a kernel per op; comm b keeps a persistent kernel, which must leave when idle
    // so that the device-wide synchronisation below returns. Where ranks share the GPU, a's op
    // kernel and b's persistent kernel are resident at once and must fit the rank's share together.
    setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);  // b's kernel holds its stream's hardware queue
    useGpu(rank, n);
    weft_comm_t a = initRank(rank, n, id);
    setenv("WEFT_ENGINE", "persistent", 1);
    weft_comm_t b = initRank(rank, n, second);
    ASSERT_TRUE(a && b);
    constexpr size_t kCount = 50000;
    void *ya, *yb, *x;
    WEFT_ASSERT_OK(weft_mem_alloc(a, kCount * 4, &ya));
    WEFT_ASSERT_OK(weft_mem_alloc(b, kCount * 4, &yb));
    WEFT_CUDA_OK(cudaMalloc(&x, kCount * 4));
    std::vector<uint8_t> in(kCount * 4);
    fillInput(in.data(), WEFT_FLOAT32, seed, rank, 0, kCount);
    toDevice(x, in);
    for (int i = 0; i < 5; ++i) {
      WEFT_ASSERT_OK(weft_allreduce(a, x, ya, kCount, WEFT_FLOAT32, nullptr));
      WEFT_ASSERT_OK(weft_allreduce(b, x, yb, kCount, WEFT_FLOAT32, nullptr));
    }
    // A device-wide synchronisation returns: the persistent kernels leave when idle.
    const auto syncStart = Clock::now();
    WEFT_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_LT(since(syncStart), 2.0);
    for (weft_comm_t c : {a, b}) {
      weft_result_t async = WEFT_SUCCESS;
      WEFT_ASSERT_OK(weft_comm_get_async_error(c, &async));
      EXPECT_EQ(async, WEFT_SUCCESS) << weft_get_last_error(c);
    }
    EXPECT_TRUE(checkAllReduce(toHost(ya, kCount * 4).data(), WEFT_FLOAT32, seed, n, kCount));
    EXPECT_TRUE(checkAllReduce(toHost(yb, kCount * 4).data(), WEFT_FLOAT32, seed, n, kCount));
    for (weft_comm_t c : {a, b}) {
      WEFT_ASSERT_OK(weft_comm_finalize(c));
      WEFT_ASSERT_OK(weft_comm_destroy(c));
    }
    cudaFree(x);
  };
  EXPECT_TRUE(runRanks(2, body));
}

// A caller's stream that never hands the in-process persistent kernel its op (in practice: a
// stream that shares the GPU's hardware queue with the resident kernel, held behind it for good)
// had a wait with no bound. Here a gate kernel holds the stream before the op's `ready` write, on
// any GPU (CUDA_DEVICE_MAX_CONNECTIONS=1 alone did not reproduce it for one op on an H100: the
// ready write went right after the kernel's launch). The handover guard fails the communicator
// within engine_handover_s, naming the persistent kernel, stops the kernel and completes the op:
// once the gate opens, the stream writes `ready`, finds the op done and drains.
TEST(GpuFaults, APersistentOpThatItsStreamCannotHandOverTimesOut) {
  WEFT_REQUIRE_GPUS(1);
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
    setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    setenv("WEFT_ENGINE", "persistent", 1);
    setenv("WEFT_ENGINE_HANDOVER_S", "2", 1);
    useGpu(rank, n);
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void *y = nullptr, *x = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 16, &y));
    WEFT_CUDA_OK(cudaMalloc(&x, 1 << 16));
    volatile uint32_t* gate = nullptr;
    WEFT_CUDA_OK(cudaHostAlloc(const_cast<uint32_t**>(&gate), sizeof(uint32_t), cudaHostAllocMapped));
    *gate = 0;
    uint32_t* gateOnDevice = nullptr;
    WEFT_CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&gateOnDevice), const_cast<uint32_t*>(gate), 0));
    cudaStream_t s;
    WEFT_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    launchGate(gateOnDevice, 30.0, s);
    const auto start = Clock::now();
    WEFT_ASSERT_OK(weft_allreduce(comm, x, y, 1 << 14, WEFT_FLOAT32, s));
    weft_result_t async = WEFT_SUCCESS;
    while (async == WEFT_SUCCESS && since(start) < 10.0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    }
    const double took = since(start);
    EXPECT_GE(took, 1.9);
    EXPECT_LT(took, 8.0);
    EXPECT_EQ(async, WEFT_ERR_TIMEOUT) << weft_get_last_error(comm);
    EXPECT_NE(std::string(weft_get_last_error(comm)).find("persistent kernel to start the op"), std::string::npos)
        << weft_get_last_error(comm);
    *gate = 1;
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_LT(since(start), 12.0) << "the stream drained once the gate opened, not at the gate's own limit";
    EXPECT_NE(weft_allreduce(comm, x, y, 16, WEFT_FLOAT32, s), WEFT_SUCCESS) << "a failed communicator is sticky";
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
    cudaFree(x);
    cudaFreeHost(const_cast<uint32_t*>(gate));
    cudaStreamDestroy(s);
  };
  EXPECT_TRUE(runRanks(1, body));
}

TEST(GpuFaults, GraphReplayWithAPeerThatNeverArrivesTimesOut) {
  WEFT_REQUIRE_GPUS(2);
  lonelyOp(false, true);
}

TEST(GpuFaults, AbortReleasesAGraphReplayWithinOneSecond) {
  WEFT_REQUIRE_GPUS(2);
  lonelyOp(true, true);
}

// A proxy job pins its heap and a mirror per remote peer in host memory: one that cannot fit fails
// init on every rank with the rank and the bytes named, before anything is pinned.
TEST(GpuFaults, AProxyHeapLargerThanTheHostFailsInitOnEveryRank) {
  WEFT_REQUIRE_GPUS(2);
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_TRANSPORT", "proxy", 1);
    useGpu(rank, n);
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.heap_bytes = uint64_t{1} << 40;  // the largest heap_bytes; pinned twice over: 2 TiB
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, &config), WEFT_ERR_OUT_OF_MEMORY, "would pin"));
    EXPECT_EQ(comm, nullptr);
  };
  EXPECT_TRUE(runRanks(2, body));
}

}  // namespace
}  // namespace weft::test
