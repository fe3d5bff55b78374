// Service mode on the CPU backend: communicators whose heap and queue weftd makes and whose engine
// it runs, behind the unchanged C API. Two jobs through one weftd run every op with results
// identical, bit for bit, to the same ops in embedded mode; a rank that dies fails its peers' ops
// at once with a named error while weftd serves on and lets the memory go; a weftd that dies fails
// its ranks' ops at once, naming it (or stops nothing, where the ranks run their own engines).
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "runtime/service/client.hpp"
#include "support/multirank.hpp"
#include "support/weftd_process.hpp"

namespace weft::test {
namespace {

using Clock = std::chrono::steady_clock;

// The environment the ranks inherit: this weftd, in the given mode, with the engine in weftd
// (service_engine weftd) unless `engine` says otherwise.
void useService(const WeftdProcess& d, const char* mode, const char* engine = "weftd") {
  setenv("WEFT_SERVICE_DIR", d.dir().c_str(), 1);
  setenv("WEFT_SERVICE", mode, 1);
  setenv("WEFT_SERVICE_ENGINE", engine, 1);
}

void clearService() {
  unsetenv("WEFT_SERVICE_DIR");
  unsetenv("WEFT_SERVICE");
  unsetenv("WEFT_SERVICE_ENGINE");
}

uint16_t bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

// Every op once on `comm` (rank `rank` of `n`), with inputs that depend on the rank and `seed`
// only; the outputs, as bytes, in op order.
std::vector<std::vector<uint8_t>> everyOp(weft_comm_t comm, int rank, int n, uint64_t seed) {
  std::vector<std::vector<uint8_t>> outs;
  const auto keep = [&](const void* p, size_t bytes) {
    const auto* b = static_cast<const uint8_t*>(p);
    outs.emplace_back(b, b + bytes);
  };
  std::vector<float> x(200000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = inputValue(seed, rank, i);
  void* heap = nullptr;
  EXPECT_EQ(weft_mem_alloc(comm, 4 << 20, &heap), WEFT_SUCCESS) << weft_get_last_error(comm);
  if (!heap) return outs;
  auto* y = static_cast<float*>(heap);
  // AllReduce: one-shot (small) and reduce-scatter + all-gather (large).
  for (size_t count : {size_t{1000}, x.size()}) {
    EXPECT_EQ(weft_allreduce(comm, x.data(), y, count, WEFT_FLOAT32, nullptr), WEFT_SUCCESS)
        << weft_get_last_error(comm);
    for (size_t i = 0; i < count; i += 997) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += inputValue(seed, r, i);
      EXPECT_NEAR(y[i], want, 1e-4) << "allreduce of " << count << ", element " << i;
    }
    keep(y, count * sizeof(float));
  }
  // All-to-All.
  const size_t per = 5000;
  EXPECT_EQ(weft_alltoall(comm, x.data(), y, per, WEFT_FLOAT32, nullptr), WEFT_SUCCESS) << weft_get_last_error(comm);
  for (int src = 0; src < n; ++src)
    EXPECT_EQ(y[src * per + 7], inputValue(seed, src, rank * per + 7)) << "alltoall block from " << src;
  keep(y, n * per * sizeof(float));
  // GEMV + AllReduce: x [2, 64], w [256, 64].
  EXPECT_EQ(weft_gemv_allreduce(comm, x.data(), x.data() + 1000, y, 2, 256, 64, WEFT_FLOAT32, nullptr), WEFT_SUCCESS)
      << weft_get_last_error(comm);
  keep(y, 2 * 256 * sizeof(float));
  // Embedding + All-to-All: 2 tables of 50 rows, dim 16, 4 samples per rank, bags of 3.
  const int64_t tables = 2, rows = 50, dim = 16, local = 4, global = local * n;
  std::vector<int64_t> tableOffsets{0, rows, 2 * rows};
  std::vector<int64_t> offsets(tables * global + 1), indices(3 * tables * global);
  for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = 3 * static_cast<int64_t>(i);
  for (size_t j = 0; j < indices.size(); ++j) indices[j] = static_cast<int64_t>((j * 7 + rank) % rows);
  EXPECT_EQ(
      weft_embedding_alltoall(comm, x.data(), tableOffsets.data(), tables, indices.data(), offsets.data(), nullptr,
                              WEFT_POOL_SUM, y, local, tables * n, tables * rank, dim, WEFT_FLOAT32, nullptr),
      WEFT_SUCCESS)
      << weft_get_last_error(comm);
  keep(y, local * tables * n * dim * sizeof(float));
  // GEMM + All-to-All (bfloat16): 8 rows to each rank, k = h = 16.
  const int64_t k = 16, h = 16, tokens = 8 * n;
  void* inputs = static_cast<uint8_t*>(heap) + (2 << 20);  // 16-byte aligned, away from recv
  auto* a = static_cast<uint16_t*>(inputs);
  std::vector<uint16_t> w(k * h);
  for (int64_t i = 0; i < tokens * k; ++i) a[i] = bf16(inputValue(seed + 1, rank, i));
  for (int64_t i = 0; i < k * h; ++i) w[i] = bf16(inputValue(seed + 2, rank, i));
  std::vector<int64_t> sendCounts(n, 8), recvCounts(n, -1);
  std::vector<uint16_t> wAligned(w);  // std::vector's storage is 16-byte aligned
  EXPECT_EQ(weft_gemm_alltoall(comm, a, wAligned.data(), sendCounts.data(), y, tokens, recvCounts.data(), tokens, k, h,
                               WEFT_BFLOAT16, nullptr),
            WEFT_SUCCESS)
      << weft_get_last_error(comm);
  for (int r = 0; r < n; ++r) EXPECT_EQ(recvCounts[r], 8);
  keep(y, tokens * h * sizeof(uint16_t));
  EXPECT_EQ(weft_mem_free(comm, heap), WEFT_SUCCESS);
  return outs;
}

TEST(ServiceMode, TwoJobsRunEveryOpIdenticallyToEmbedded) {
  // weftd's engines with fewer workers than the ranks' persistent_ctas (2 on the CPU backend):
  // weftd tells the ranks, which cut their ops for one worker.
  setenv("WEFT_SERVICE_ENGINE_CTAS", "1", 1);
  WeftdProcess d;
  unsetenv("WEFT_SERVICE_ENGINE_CTAS");
  ASSERT_TRUE(d.started()) << d.output();
  useService(d, "on");
  // Job A: ranks 0-1 (2 ranks), its engines in weftd; job B: ranks 2-5 (4 ranks), running their
  // own engines over weftd's memory (service_engine rank). Each rank runs every op through weftd
  // and again embedded, and compares.
  weft_unique_id_t ids[4];
  for (auto& id : ids) ASSERT_EQ(weft_get_unique_id(&id), WEFT_SUCCESS);
  const uint64_t seed = freshSeed();
  EXPECT_TRUE(runRanks(6, [&](int r, int, const weft_unique_id_t&) {
    const bool jobA = r < 2;
    const int rank = jobA ? r : r - 2, n = jobA ? 2 : 4;
    if (!jobA) setenv("WEFT_SERVICE_ENGINE", "rank", 1);
    weft_comm_t served = initRank(rank, n, ids[jobA ? 0 : 1]);
    ASSERT_NE(served, nullptr);
    setenv("WEFT_SERVICE", "off", 1);
    weft_comm_t embedded = initRank(rank, n, ids[jobA ? 2 : 3]);
    ASSERT_NE(embedded, nullptr);
    if (rank == 0) {
      // weftd holds both jobs' communicators (this one's at least) while they run, and weftctl
      // status lists this one with its ranks.
      const auto s = statusOf(d);
      EXPECT_GE(s.head.comms, 1u);
      EXPECT_GT(s.head.heldBytes, 0u);
      int rc = 0;
      const std::string out = runCommand(std::string(WEFT_TEST_WEFTCTL) + " status --dir " + d.dir(), 30, &rc);
      EXPECT_EQ(rc, 0) << out;
      EXPECT_NE(out.find("of " + std::to_string(n) + " ranks attached"), std::string::npos) << out;
    }
    const auto viaWeftd = everyOp(served, rank, n, seed);
    const auto inProcess = everyOp(embedded, rank, n, seed);
    ASSERT_EQ(viaWeftd.size(), 6u);
    ASSERT_EQ(viaWeftd.size(), inProcess.size());
    for (size_t i = 0; i < viaWeftd.size(); ++i)
      EXPECT_TRUE(viaWeftd[i] == inProcess[i]) << "op " << i << " differs between service and embedded mode";
    EXPECT_EQ(weft_comm_destroy(served), WEFT_SUCCESS);
    EXPECT_EQ(weft_comm_destroy(embedded), WEFT_SUCCESS);
  }));
  clearService();
  EXPECT_TRUE(releasesEverything(d));
  EXPECT_EQ(d.stop(SIGTERM, 20), 0) << d.output();
  EXPECT_NE(d.output().find("engine in weftd, workers: 1"), std::string::npos) << d.output();
  EXPECT_NE(d.output().find("engine in the rank"), std::string::npos) << d.output();
}

// `n` ranks through weftd (service on), whose timeout is far longer than a failure may take: the
// last one runs `die`, which ends its process, and every other rank's next op must then fail at
// once, naming the last rank's process. How each rank ended.
std::vector<RankExit> lastRankDies(int n, const std::function<void()>& die) {
  return forkRanks(n, [&](int rank, int nranks, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.timeout_s = 60;
    weft_comm_t comm = initRank(rank, nranks, id, &config);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    if (rank == nranks - 1) {
      die();
      return;
    }
    std::vector<float> x(100000, 1.0f);
    const auto start = Clock::now();
    EXPECT_TRUE(failsWith(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr), WEFT_ERR_TRANSPORT,
                          "rank " + std::to_string(nranks - 1) + "'s process"));
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    EXPECT_EQ(async, WEFT_ERR_TRANSPORT);
    EXPECT_EQ(weft_comm_destroy(comm), WEFT_SUCCESS);
  });
}

void aRankDies(const char* engine);

// Whoever runs the engines: weftd writes the failure where the ranks' engines look.
TEST(ServiceMode, ARankThatDiesFailsItsPeersAtOnce) {
  for (const char* engine : {"weftd", "rank"}) {
    SCOPED_TRACE(std::string("service_engine ") + engine);
    aRankDies(engine);
  }
}

void aRankDies(const char* engine) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  useService(d, "on", engine);
  const std::vector<RankExit> exits = lastRankDies(3, [] { ::kill(::getpid(), SIGKILL); });
  ASSERT_EQ(exits.size(), 3u);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(exits[r].exited && exits[r].code == 0) << "rank " << r;
  EXPECT_TRUE(!exits[2].exited && exits[2].code == SIGKILL);
  // weftd serves on: the memory is let go, and a new job runs through it.
  EXPECT_TRUE(releasesEverything(d));
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    std::vector<float> x(1000, static_cast<float>(rank + 1));
    WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr));
    EXPECT_EQ(static_cast<float*>(y)[999], 3.0f);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  }));
  clearService();
  EXPECT_TRUE(releasesEverything(d));
  EXPECT_NE(d.output().find("rank 2 (pid"), std::string::npos) << d.output();
}

// A rank that forked a child (without exec) and then died: the child holds the rank's connection
// to weftd open, so only the rank's process ending says it is gone. Its peers fail at once all
// the same, not at their timeout.
TEST(ServiceMode, ARankWhoseChildHoldsItsConnectionFailsItsPeersAtOnceWhenItDies) {
#if defined(SYS_pidfd_open)
  const long probe = ::syscall(SYS_pidfd_open, ::getpid(), 0);
  if (probe < 0) GTEST_SKIP() << "no pidfd here (Linux 5.3 on, not filtered): weftd sees only the connection";
  ::close(static_cast<int>(probe));
#else
  GTEST_SKIP() << "built without pidfd_open: weftd sees only the connection";
#endif
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  useService(d, "on");
  // The child lives until every write end of this pipe has closed: the test's last, at its end.
  int lifeline[2];
  ASSERT_EQ(::pipe(lifeline), 0);
  const std::vector<RankExit> exits = lastRankDies(2, [&] {
    if (::fork() == 0) {
      // The child: every descriptor of the rank, weftd's connection among them, outside the
      // test's output.
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::close(lifeline[1]);
      char byte;
      while (::read(lifeline[0], &byte, 1) != 0 && errno == EINTR) {
      }
      ::_exit(0);
    }
    ::kill(::getpid(), SIGKILL);
  });
  ::close(lifeline[0]);
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0);
  EXPECT_TRUE(!exits[1].exited && exits[1].code == SIGKILL);
  clearService();
  EXPECT_TRUE(releasesEverything(d));
  ::close(lifeline[1]);
  EXPECT_NE(d.output().find("a child it forked holds it"), std::string::npos) << d.output();
}

TEST(ServiceMode, OnWithoutAWeftdNamesTheDirectory) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  ASSERT_EQ(d.stop(SIGTERM, 20), 0);
  useService(d, "on");
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_USAGE,
                          "no weftd serves " + d.dir()));
  }));
  // auto runs embedded instead.
  useService(d, "auto");
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  }));
  clearService();
}

TEST(ServiceMode, AKilledWeftdFailsItsRanksOpsAtOnce) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  const pid_t daemon = d.pid();
  useService(d, "on");
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.timeout_s = 60;  // far longer than the failure may take
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    std::vector<float> x(1000, 1.0f);
    if (rank == 0) {
      // The other rank's first op pairs with this one and may end either way.
      WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr));
      ::kill(daemon, SIGKILL);
    }
    // weftd ran the engine: the ops fail, naming it, within a moment of its end.
    const auto start = Clock::now();
    weft_result_t r = WEFT_SUCCESS;
    for (int i = 0; i < 100000 && r == WEFT_SUCCESS; ++i)
      r = weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr);
    EXPECT_NE(r, WEFT_SUCCESS);
    EXPECT_NE(std::string(weft_get_last_error(comm)).find("weftd (pid " + std::to_string(daemon) + ")"),
              std::string::npos)
        << weft_get_last_error(comm);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    EXPECT_EQ(async, WEFT_ERR_TRANSPORT);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  }));
  clearService();
  EXPECT_EQ(d.stop(0, 20), -SIGKILL);
}

TEST(ServiceMode, InputsOutsideTheHeapMustFitTheStagingSegment) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  useService(d, "on");
  setenv("WEFT_SERVICE_STAGING_BYTES", "1M", 1);
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* heap = nullptr;
    const size_t count = 512 * 1024;  // 2 MB of float32
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 2 * count * sizeof(float), &heap));
    std::vector<float> x(count, static_cast<float>(rank + 1));
    auto* y = static_cast<float*>(heap);
    EXPECT_TRUE(failsWith(weft_allreduce(comm, x.data(), y, count, WEFT_FLOAT32, nullptr), WEFT_ERR_INVALID_ARGUMENT,
                          "sendbuf: 2097152 bytes outside the symmetric heap"));
    // Sizes the caller's own memory gives (a table of 2^61 rows) are refused, not wrapped into a short
    // staged range that weftd's engine would read past.
    const std::vector<int64_t> hugeTable{0, int64_t{1} << 61};
    const std::vector<int64_t> noBags(n + 1, 0);
    const int64_t noIndex = 0;
    EXPECT_TRUE(failsWith(weft_embedding_alltoall(comm, x.data(), hugeTable.data(), 1, &noIndex, noBags.data(), nullptr,
                                                  WEFT_POOL_SUM, y, 1, n, rank, 16, WEFT_FLOAT32, nullptr),
                          WEFT_ERR_INVALID_ARGUMENT, "weights: its size overflows"));
    // Nothing ran: the communicator is fine, and the same input from the heap needs no staging.
    float* inHeap = y + count;
    std::copy(x.begin(), x.end(), inHeap);
    WEFT_ASSERT_OK(weft_allreduce(comm, inHeap, y, count, WEFT_FLOAT32, nullptr));
    EXPECT_EQ(y[count - 1], 3.0f);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  }));
  unsetenv("WEFT_SERVICE_STAGING_BYTES");
  clearService();
}

// weftd's engine on the CPU backend reads inputs outside the heap through the staging segment:
// none at all is refused at init, naming the setting and the way out.
TEST(ServiceMode, WeftdsEngineWithoutAStagingSegmentIsRefusedNamingTheSetting) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  useService(d, "on");
  setenv("WEFT_SERVICE_STAGING_BYTES", "0", 1);
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_ARGUMENT,
                          "service_staging_bytes: 0 leaves weftd's engine"));
  }));
  unsetenv("WEFT_SERVICE_STAGING_BYTES");
  clearService();
}

TEST(ServiceMode, AJobWithItsOwnEngineOutlivesAKilledWeftd) {
  auto d = std::make_unique<WeftdProcess>();
  ASSERT_TRUE(d->started()) << d->output();
  const std::string dir = d->dir();
  const pid_t daemon = d->pid();
  // The ranks run their engines; weftd only made the memory.
  useService(*d, "on", "rank");
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.timeout_s = 10;
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    if (rank == 0) ::kill(daemon, SIGKILL);
    // The heap and queue are this process's mappings: ops go on, neither failing nor hanging.
    std::vector<float> x(100000, static_cast<float>(rank + 1));
    const auto start = Clock::now();
    for (int i = 0; i < 5; ++i) WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr));
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
    EXPECT_EQ(static_cast<float*>(y)[4242], 3.0f);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  }));
  EXPECT_EQ(d->stop(0, 20), -SIGKILL);
  // A new communicator finds the dead weftd's socket and says so.
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_USAGE, "has died"));
  }));
  // A weftd started again on the directory serves new communicators.
  WeftdProcess again({}, dir);
  ASSERT_TRUE(again.started()) << again.output();
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  }));
  clearService();
  EXPECT_TRUE(releasesEverything(again));
}

TEST(ServiceMode, SigtermWaitsForAttachedCommunicators) {
  WeftdProcess d;
  ASSERT_TRUE(d.started()) << d.output();
  const pid_t daemon = d.pid();
  useService(d, "on");
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    if (rank == 0) {
      ::kill(daemon, SIGTERM);
      // The socket goes at once (new communicators find none); weftd stays for this one.
      bool gone = false;
      for (int i = 0; i < 500 && !gone; ++i) {
        gone = ::access(d.socket().c_str(), F_OK) != 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      EXPECT_TRUE(gone);
      EXPECT_EQ(::kill(daemon, 0), 0);
    }
    std::vector<float> x(1000, 1.0f);
    WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr));
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  }));
  clearService();
  EXPECT_EQ(d.stop(0, 20), 0) << d.output();
  EXPECT_NE(d.output().find("draining"), std::string::npos);
}

}  // namespace
}  // namespace weft::test
