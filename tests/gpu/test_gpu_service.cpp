// Service mode on GPUs: weftd makes every rank's heap on the rank's GPU (device memory passed by
// file descriptor) and the ranks run their engines over it (or weftd runs its persistent kernel
// for them, service_engine weftd), behind the unchanged C API. The ops
// give embedded mode's results, eagerly and replayed from a graph; weftd holds the communicator's
// memory while it lives and lets it go after; a rank that dies fails its peer's ops, naming it,
// long before the timeout.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "gpu_support.hpp"
#include "runtime/config.hpp"
#include "runtime/service/attach.hpp"
#include "runtime/service/client.hpp"
#include "support/multirank.hpp"
#include "support/oracle.hpp"
#include "support/weftd_process.hpp"

namespace weft::test {
namespace {

using Clock = std::chrono::steady_clock;

class GpuService : public OnEveryBackend {
 protected:
  // weftd serves the ranks of one node: a job whose settings make its ranks separate nodes
  // (gpu-check.sh's proxy step) refuses service=on at init, by design, for the reason init gives.
  void SetUp() override {
    OnEveryBackend::SetUp();
    if (IsSkipped()) return;
    std::string why;
    try {
      why = service::separateNodes(Settings::resolve());
    } catch (const Error&) {
      return;  // settings init refuses: the case itself will say so
    }
    if (!why.empty()) GTEST_SKIP() << "weftd serves one node, and this job's ranks are separate nodes: " << why;
  }
  void TearDown() override {
    unsetenv("WEFT_SERVICE_DIR");
    unsetenv("WEFT_SERVICE");
    unsetenv("WEFT_SERVICE_ENGINE");
  }
  // The ranks this test forks find `d`, and must use it (service=on fails init otherwise).
  static void useService(const WeftdProcess& d) {
    setenv("WEFT_SERVICE_DIR", d.dir().c_str(), 1);
    setenv("WEFT_SERVICE", "on", 1);
  }
  void opsOverWeftdHeaps();
};

std::vector<uint8_t> input(uint64_t seed, int rank, uint64_t count) {
  std::vector<uint8_t> v(count * sizeof(float));
  fillInput(v.data(), WEFT_FLOAT32, seed, rank, 0, count);
  return v;
}

// service_engine weftd: weftd's persistent kernel runs the ranks' ops, reading their inputs
// (cudaMalloc memory here) where weftd maps them; rank (the default): the ranks run their engines.
TEST_P(GpuService, OpsRunOverHeapsWeftdMakesOnEachGpu) {
  for (const char* engine : {"weftd", "rank"}) {
    SCOPED_TRACE(std::string("service_engine ") + engine);
    setenv("WEFT_SERVICE_ENGINE", engine, 1);
    opsOverWeftdHeaps();
  }
}

void GpuService::opsOverWeftdHeaps() {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  useService(d);
  const uint64_t seed = freshSeed();
  constexpr uint64_t kCount = 50000;
  const int n = ranks();
  const RankBody body = [&](int rank, int nranks, const weft_unique_id_t& id) {
    Rank r = setUp(rank, nranks, id, kCount * nranks * sizeof(float));
    ASSERT_NE(r.comm, nullptr) << weft_get_last_error(nullptr);
    // weftd holds every rank's heap while the communicator lives.
    if (rank == 0) {
      const auto s = statusOf(d);
      EXPECT_EQ(s.head.comms, 1u);
      EXPECT_GE(s.head.heldBytes, uint64_t{kCount} * sizeof(float) * nranks);
    }
    toDevice(r.input, input(seed, rank, kCount * nranks));
    WEFT_ASSERT_OK(weft_allreduce(r.comm, r.input, r.heap, kCount, WEFT_FLOAT32, r.stream));
    WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
    EXPECT_TRUE(checkAllReduce(toHost(r.heap, kCount * sizeof(float)).data(), WEFT_FLOAT32, seed, nranks, kCount));
    WEFT_ASSERT_OK(weft_alltoall(r.comm, r.input, r.heap, kCount, WEFT_FLOAT32, r.stream));
    WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
    EXPECT_TRUE(checkAllToAll(toHost(r.heap, kCount * nranks * sizeof(float)).data(), WEFT_FLOAT32, seed, rank, nranks,
                              kCount));
    // A captured AllReduce, replayed twice.
    WEFT_CUDA_OK(cudaMemset(r.heap, 0xff, kCount * sizeof(float)));
    cudaGraphExec_t exec = captureGraph(r.stream, [&] {
      EXPECT_EQ(weft_allreduce(r.comm, r.input, r.heap, kCount, WEFT_FLOAT32, r.stream), WEFT_SUCCESS);
    });
    ASSERT_NE(exec, nullptr);
    for (int i = 0; i < 2; ++i) WEFT_CUDA_OK(cudaGraphLaunch(exec, r.stream));
    WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
    cudaGraphExecDestroy(exec);
    EXPECT_TRUE(checkAllReduce(toHost(r.heap, kCount * sizeof(float)).data(), WEFT_FLOAT32, seed, nranks, kCount));
    tearDown(r);
  };
  EXPECT_TRUE(runRanks(n, body));
  EXPECT_TRUE(releasesEverything(d));
  if (HasFailure()) ADD_FAILURE() << "weftd's log:\n" << d.output();
}

// weftd's kernel leaves the GPU once its queue has been idle for service_engine_idle_us (1 ms
// here), and the rank's next op asks weftd to start it again. Each round's input is a fresh
// cudaMalloc that the rank frees after the op, so the next one mostly lands on the same address:
// weftd retires the freed allocation's mapping and closes it only while none of its kernels runs
// (a close under a running kernel waits for it to end, which a resident kernel never does).
TEST_P(GpuService, AnEngineThatLeftWhenIdleIsWokenAndFreedInputsAreLetGo) {
  if (gEngine != "launched") GTEST_SKIP() << "weftd runs the engine: one engine setting is enough";
  setenv("WEFT_SERVICE_ENGINE_IDLE_US", "1000", 1);
  WeftdProcess d;
  unsetenv("WEFT_SERVICE_ENGINE_IDLE_US");
  ASSERT_TRUE(d.started()) << d.output();
  useService(d);
  setenv("WEFT_SERVICE_ENGINE", "weftd", 1);
  const uint64_t seed = freshSeed();
  constexpr uint64_t kCount = 4096;
  const RankBody body = [&](int rank, int nranks, const weft_unique_id_t& id) {
    Rank r = setUp(rank, nranks, id, kCount * sizeof(float));
    ASSERT_NE(r.comm, nullptr) << weft_get_last_error(nullptr);
    for (int round = 0; round < 6; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      void* in = nullptr;
      WEFT_CUDA_OK(cudaMalloc(&in, kCount * sizeof(float)));
      toDevice(in, input(seed + round, rank, kCount));
      WEFT_CUDA_OK(cudaMemset(r.heap, 0xff, kCount * sizeof(float)));
      WEFT_ASSERT_OK(weft_allreduce(r.comm, in, r.heap, kCount, WEFT_FLOAT32, r.stream));
      WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
      EXPECT_TRUE(
          checkAllReduce(toHost(r.heap, kCount * sizeof(float)).data(), WEFT_FLOAT32, seed + round, nranks, kCount));
      WEFT_CUDA_OK(cudaFree(in));
      std::this_thread::sleep_for(std::chrono::milliseconds(round % 2 ? 1 : 30));  // long past the idle time, or not
    }
    tearDown(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
  EXPECT_TRUE(releasesEverything(d));
  if (HasFailure()) ADD_FAILURE() << "weftd's log:\n" << d.output();
}

// Rank 1 is killed after init; rank 0's next op waits for it. weftd sees the rank's process end
// and fails rank 0's engine: its op ends within seconds (the timeout is 60), naming rank 1's
// process, and weftd lets the memory go. The launched case runs the ranks' own kernels
// (service_engine rank), the persistent one weftd's.
TEST_P(GpuService, ARankThatDiesFailsItsPeerNamingIt) {
  if (ranks() != 2) GTEST_SKIP() << "two ranks make the case";
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  useService(d);
  setenv("WEFT_SERVICE_ENGINE", gEngine == "persistent" ? "weftd" : "rank", 1);
  const std::vector<RankExit> exits = forkRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.timeout_s = 60;
    Rank r = setUp(rank, n, id, 1 << 20, &config);
    ASSERT_NE(r.comm, nullptr) << weft_get_last_error(nullptr);
    if (rank == 1) ::kill(::getpid(), SIGKILL);
    const auto start = Clock::now();
    (void)weft_allreduce(r.comm, r.input, r.heap, 1 << 16, WEFT_FLOAT32, r.stream);
    (void)cudaStreamSynchronize(r.stream);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 20.0);
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(r.comm, &async));
    EXPECT_EQ(async, WEFT_ERR_TRANSPORT) << weft_get_last_error(r.comm);
    EXPECT_NE(std::string(weft_get_last_error(r.comm)).find("rank 1's process"), std::string::npos)
        << weft_get_last_error(r.comm);
    EXPECT_EQ(weft_comm_destroy(r.comm), WEFT_SUCCESS);
  });
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0);
  EXPECT_TRUE(!exits[1].exited && exits[1].code == SIGKILL);
  EXPECT_TRUE(releasesEverything(d));
}

WEFT_INSTANTIATE_ON_EVERY_BACKEND(GpuService);

}  // namespace
}  // namespace weft::test
