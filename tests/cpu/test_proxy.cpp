// The host proxy's own behaviour: faults through it, ranks that disagree about it, back-ends that
// are not there, and nothing left behind. (Every op through it, on each back-end and topology, is
// the rest of this suite run again with the proxy forced: tests/CMakeLists.txt.)
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "support/multirank.hpp"
#include "support/oracle.hpp"

namespace weft::test {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A back-end and its library's own choice of transport, as a user sets them.
struct Backend {
  const char* name;
  const char* backend;  // proxy_backend
  const char* var;      // UCX_TLS or FI_PROVIDER
  const char* value;
};
// The back-ends this build has (the ThreadSanitizer build leaves UCX out: cmake/WeftDependencies.cmake).
const std::vector<Backend> kBackends = {
#if defined(WEFT_TEST_UCX)
    {"ucx_tcp", "ucx", "UCX_TLS", "tcp"},
    {"ucx_shm", "ucx", "UCX_TLS", "posix,self"},  // shared memory without CMA (EPERM in some containers)
#endif
#if defined(WEFT_TEST_OFI)
    {"ofi_tcp", "ofi", "FI_PROVIDER", "tcp"},
    {"ofi_shm", "ofi", "FI_PROVIDER", "shm"},
#endif
};
constexpr Backend kUcxTcp{"ucx_tcp", "ucx", "UCX_TLS", "tcp"}, kOfiTcp{"ofi_tcp", "ofi", "FI_PROVIDER", "tcp"};

#define WEFT_REQUIRE_A_BACKEND() \
  if (kBackends.empty()) GTEST_SKIP() << "no proxy back-end is built"

// Traffic through the proxy is left to the normal build (tests/CMakeLists.txt says why).
#if defined(WEFT_TEST_SANITIZED)
#define WEFT_SKIP_UNDER_SANITIZERS() GTEST_SKIP() << "the proxy's traffic runs in the normal build only"
#else
#define WEFT_SKIP_UNDER_SANITIZERS() (void)0
#endif

void useBackend(const Backend& b) {
  setenv("WEFT_TRANSPORT", "proxy", 1);
  setenv("WEFT_PROXY_BACKEND", b.backend, 1);
  setenv(b.var, b.value, 1);
}

int countEntries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

// A loopback port that is free now (the kernel's choice), so that runs in parallel do not collide.
int freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) close(fd);
  return ok ? ntohs(a.sin_port) : 0;
}

class Proxy : public ::testing::TestWithParam<Backend> {};

// A rank killed mid-job: every survivor's op fails within the timeout (the back-end's own error,
// or the wait's timeout where the transport cannot tell), naming a rank, and the failure sticks.
TEST_P(Proxy, AKilledRankFailsTheSurvivorsWithinTheTimeout) {
  WEFT_SKIP_UNDER_SANITIZERS();
  const Backend b = GetParam();
  std::vector<RankExit> exits = forkRanks(3, [&](int rank, int n, const weft_unique_id_t& id) {
    useBackend(b);
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.timeout_s = 5.0;  // the first op, under a sanitizer on a loaded machine, takes its time
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    std::vector<float> x(100000, 1.0f);
    WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr));  // connections up
    // Rank 1 dies once it has finished a second op. Finishing an op says nothing of the survivors'
    // traffic to it, which may still be in flight (so it must not die after the first), but rank
    // 1 can finish the second only after every survivor has started it, and so has returned from
    // the first. A survivor's second op may finish before the death or fail with it.
    auto start = Clock::now();
    weft_result_t r = weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr);
    if (rank == 1) kill(getpid(), SIGKILL);
    if (r == WEFT_SUCCESS) {
      start = Clock::now();
      r = weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr);
    }
    EXPECT_TRUE(r == WEFT_ERR_TRANSPORT || r == WEFT_ERR_TIMEOUT) << weft_get_error_string(r);
    EXPECT_NE(std::string(weft_get_last_error(nullptr)).find("rank "), std::string::npos)
        << weft_get_last_error(nullptr);
    EXPECT_LT(secondsSince(start), 5.0 + 2.0);
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    EXPECT_NE(async, WEFT_SUCCESS);
    const auto again = Clock::now();
    EXPECT_NE(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr), WEFT_SUCCESS);
    EXPECT_LT(secondsSince(again), 0.5);
    const auto destroy = Clock::now();
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
    EXPECT_LT(secondsSince(destroy), 3.0);  // the proxy's drain is bounded with a dead peer
  });
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_FALSE(exits[1].exited);
  for (int r : {0, 2}) EXPECT_TRUE(exits[r].exited && exits[r].code == 0) << "rank " << r;
}

// A rank of this host that dies while the others wait in an op for it: they fail at once, long
// before timeout_s, naming it (the proxy watches its host's peers: shared-memory transports
// cannot tell), and destroy is prompt.
TEST_P(Proxy, ARankThatDiesOnThisHostFailsTheWaitingOpsAtOnce) {
  WEFT_SKIP_UNDER_SANITIZERS();
  const Backend b = GetParam();
  std::vector<RankExit> exits = forkRanks(3, [&](int rank, int n, const weft_unique_id_t& id) {
    useBackend(b);
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.timeout_s = 60.0;
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    std::vector<float> x(100000, 1.0f);
    WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr));  // connections up
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others wait in the next op
      kill(getpid(), SIGKILL);
    }
    const auto start = Clock::now();
    EXPECT_EQ(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr), WEFT_ERR_TRANSPORT);
    EXPECT_LT(secondsSince(start), 5.0);
    EXPECT_NE(std::string(weft_get_last_error(nullptr)).find("rank 1"), std::string::npos)
        << weft_get_last_error(nullptr);
    const auto destroy = Clock::now();
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
    EXPECT_LT(secondsSince(destroy), 3.0);
  });
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_FALSE(exits[1].exited);
  for (int r : {0, 2}) EXPECT_TRUE(exits[r].exited && exits[r].code == 0) << "rank " << r;
}

// Abort while an op waits on a peer that never joins: it returns within a second, and destroy
// does not wait for the proxy to drain.
TEST_P(Proxy, AbortEndsAWaitingOpWithinOneSecond) {
  WEFT_SKIP_UNDER_SANITIZERS();
  const Backend b = GetParam();
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    useBackend(b);
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      WEFT_ASSERT_OK(weft_comm_destroy(comm));
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT_EQ(weft_comm_abort(comm), WEFT_SUCCESS);
    });
    std::vector<float> x(4096, 2.0f);
    const auto start = Clock::now();
    EXPECT_TRUE(
        failsWith(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr), WEFT_ERR_ABORTED, "abort"));
    EXPECT_LT(secondsSince(start), 0.3 + 1.0);
    aborter.join();
    const auto destroy = Clock::now();
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
    EXPECT_LT(secondsSince(destroy), 1.0);
  }));
}

// Communicators made and destroyed over the proxy leave no thread, descriptor or mapping behind.
// Each one joins through the launcher's variables on a port of its own (a unique id serves once).
TEST_P(Proxy, NothingIsLeftBehind) {
  WEFT_SKIP_UNDER_SANITIZERS();
  const Backend b = GetParam();
  std::vector<int> ports;
  for (int i = 0; i < 5; ++i) ports.push_back(freePort());
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t&) {
    useBackend(b);
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
    setenv("WEFT_BOOTSTRAP_ADDR", "127.0.0.1", 1);
    setenv("WEFT_BOOTSTRAP_SECRET", "proxy-leak-test", 1);
    auto once = [&](int i) {
      setenv("WEFT_BOOTSTRAP_PORT", std::to_string(ports[i]).c_str(), 1);
      weft_comm_t comm = nullptr;
      WEFT_ASSERT_OK(weft_comm_init_env(&comm, nullptr));
      void* y = nullptr;
      WEFT_ASSERT_OK(weft_mem_alloc(comm, 4096, &y));
      std::vector<float> x(1024, 1.0f);
      WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr));
      WEFT_ASSERT_OK(weft_comm_finalize(comm));
      WEFT_ASSERT_OK(weft_comm_destroy(comm));
    };
    once(0);  // the libraries' one-time state
    const int threads = countEntries("/proc/self/task"), fds = countEntries("/proc/self/fd");
    for (int i = 1; i <= 4; ++i) once(i);
    EXPECT_EQ(countEntries("/proc/self/task"), threads);
    EXPECT_LE(countEntries("/proc/self/fd"), fds);
  }));
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Proxy);
INSTANTIATE_TEST_SUITE_P(Backends, Proxy, ::testing::ValuesIn(kBackends),
                         [](const auto& info) { return std::string(info.param.name); });

// One rank asks for the proxy and another does not: every rank fails at init, naming the setting.
TEST(ProxySetup, RanksThatDisagreeOnTheTransportFailInit) {
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_TRANSPORT", rank == 0 ? "proxy" : "auto", 1);
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_USAGE, "transport"));
  }));
}

TEST(ProxySetup, RanksThatDisagreeOnTheBackEndFailInit) {
#if !defined(WEFT_TEST_UCX) || !defined(WEFT_TEST_OFI)
  GTEST_SKIP() << "needs both back-ends built";
#endif
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    useBackend(rank == 0 ? kUcxTcp : kOfiTcp);
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_USAGE, "proxy_backend"));
  }));
}

// libfabric's tcp (ofi_rxm) connects only ranks whose eager buffers are equal: ranks that set
// FI_OFI_RXM_BUFFER_SIZE differently fail init together, naming the variable, instead of waiting
// for connections that never come up.
TEST(ProxySetup, RanksWithDifferentRxmBuffersFailInit) {
#if !defined(WEFT_TEST_OFI)
  GTEST_SKIP() << "needs the libfabric back-end built";
#endif
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    useBackend(kOfiTcp);
    if (rank == 0) setenv("FI_OFI_RXM_BUFFER_SIZE", "65792", 1);
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(
        failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_USAGE, "FI_OFI_RXM_BUFFER_SIZE"));
  }));
}

// Through the proxy `auto` stands for another bound than without: a rank that sets oneshot_max_bytes
// to the value auto stands for elsewhere would run the one-shot where the others do not. Init
// refuses that.
TEST(ProxySetup, RanksThatDisagreeOnOneShotAutoFailInit) {
  WEFT_REQUIRE_A_BACKEND();
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    useBackend(kBackends[0]);
    if (rank == 0) setenv("WEFT_ONESHOT_MAX_BYTES", "64K", 1);  // the CPU backend's auto value
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_USAGE,
                          "oneshot_max_bytes (through the host proxy, auto means up to 4 KB sent in all): rank "));
  }));
}

// A provider that does not exist: a clear error on every rank, saying what was tried.
TEST(ProxySetup, AMissingProviderIsAClearInitError) {
#if !defined(WEFT_TEST_OFI)
  GTEST_SKIP() << "needs the libfabric back-end built";
#endif
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    useBackend(Backend{"none", "ofi", "FI_PROVIDER", "no-such-provider"});
    weft_comm_t comm = nullptr;
    const weft_result_t r = weft_comm_init_rank(&comm, n, id, rank, nullptr);
    EXPECT_TRUE(r == WEFT_ERR_NOT_SUPPORTED || r == WEFT_ERR_TRANSPORT) << weft_get_error_string(r);
    const std::string msg = weft_get_last_error(nullptr);
    EXPECT_NE(msg.find("FI_PROVIDER=no-such-provider"), std::string::npos) << msg;
  }));
}

TEST(ProxySetup, ABadBackEndNameIsNamed) {
  EXPECT_TRUE(runRanks(1, [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_PROXY_BACKEND", "carrier-pigeon", 1);
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(
        failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_ARGUMENT, "proxy_backend"));
  }));
}

TEST(ProxySetup, AProxyCpuThatDoesNotExistIsNamed) {
  WEFT_REQUIRE_A_BACKEND();
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    useBackend(kBackends[0]);
    setenv("WEFT_PROXY_CPU", "100000", 1);
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_ARGUMENT, "proxy_cpu"));
  }));
}

// libfabric's shm provider names its region after the process id unless told otherwise, so a region
// left by a killed process of an earlier job made the provider refuse a later process that got the
// same pid (and tearing down the half-opened endpoint then crashed). Each rank here finds such a
// leftover under its own pid and must initialise and work all the same.
TEST(ProxySetup, AnOfiShmRegionLeftUnderThisPidDoesNotStopInit) {
#if !defined(WEFT_TEST_OFI)
  GTEST_SKIP() << "needs the libfabric back-end built";
#endif
  WEFT_SKIP_UNDER_SANITIZERS();
  EXPECT_TRUE(runRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    useBackend(Backend{"ofi_shm", "ofi", "FI_PROVIDER", "shm"});
    const std::string leftover = "/dev/shm/" + std::to_string(getpid()) + ":0:0";
    const int fd = open(leftover.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << leftover;
    ASSERT_EQ(ftruncate(fd, 1 << 16), 0);
    close(fd);
    weft_comm_t comm = initRank(rank, n, id);
    unlink(leftover.c_str());
    ASSERT_NE(comm, nullptr) << weft_get_last_error(nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 4096, &y));
    std::vector<float> x(1024, 1.0f + rank);
    WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(static_cast<const float*>(y)[i], 3.0f) << i;
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  }));
}

// node_ranks splits one host into nodes: p2p inside a block, the proxy across, and a job asking for
// p2p everywhere is told which rank is on another node.
TEST(ProxySetup, NodeRanksSplitsTheHost) {
  EXPECT_TRUE(runRanks(4, [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_NODE_RANKS", "2", 1);
    setenv("WEFT_TRANSPORT", "p2p", 1);
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_USAGE,
                          "is on another node (node_ranks)"));
  }));
}

}  // namespace
}  // namespace weft::test
