// Faults become errors, never hangs: a rank that never joins an op, a rank that dies, an abort
// from another thread, a full queue.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "support/multirank.hpp"
#include "support/oracle.hpp"

namespace weft::test {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

weft_config_t shortTimeout(double seconds) {
  weft_config_t c = WEFT_CONFIG_INITIALIZER;
  c.timeout_s = seconds;
  return c;
}

// Ranks other than `absent` run one AllReduce that `absent` never joins. Without status pages the
// ranks cannot tell a killed peer from a slow one (the peer watch needs its page), so the wait's
// timeout is what ends it.
void expectTimeoutWithout(int absent, bool absentDies) {
  const double timeout = 1.0;
  std::vector<RankExit> exits = forkRanks(3, [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_STATUS_PAGES", "0", 1);
    weft_config_t config = shortTimeout(timeout);
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    if (rank == absent) {
      if (absentDies) kill(getpid(), SIGKILL);
      std::this_thread::sleep_for(std::chrono::duration<double>(3 * timeout));
      WEFT_ASSERT_OK(weft_comm_destroy(comm));
      return;
    }
    std::vector<float> x(100000, 1.0f);
    const auto start = Clock::now();
    EXPECT_TRUE(failsWith(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr), WEFT_ERR_TIMEOUT,
                          "rank " + std::to_string(absent)));
    const double took = secondsSince(start);
    EXPECT_GE(took, timeout * 0.9);
    EXPECT_LT(took, timeout + 2.0);
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    EXPECT_EQ(async, WEFT_ERR_TIMEOUT);
    // The failure is sticky: the next op fails at once instead of waiting again.
    const auto again = Clock::now();
    EXPECT_EQ(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr), WEFT_ERR_TIMEOUT);
    EXPECT_LT(secondsSince(again), 0.5);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  });
  ASSERT_EQ(exits.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    if (r == absent && absentDies) {
      EXPECT_FALSE(exits[r].exited) << "rank " << r;
      continue;
    }
    EXPECT_TRUE(exits[r].exited && exits[r].code == 0) << "rank " << r;
  }
}

TEST(Faults, RankThatNeverJoinsMakesOthersTimeOut) { expectTimeoutWithout(2, false); }

TEST(Faults, KilledRankWithoutStatusPagesMakesOthersTimeOut) { expectTimeoutWithout(1, true); }

// A rank of the host killed while the others wait in an op for it: they fail at once (the peer
// watch sees its process end with its status page still there), long before timeout_s, naming it.
TEST(Faults, KilledRankFailsTheOthersAtOnce) {
  std::vector<RankExit> exits = forkRanks(3, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = shortTimeout(60);
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    std::vector<float> x(100000, 1.0f);
    WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr));
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others wait in the next op
      kill(getpid(), SIGKILL);
    }
    const auto start = Clock::now();
    EXPECT_TRUE(failsWith(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr), WEFT_ERR_TRANSPORT,
                          "rank 1's process"));
    EXPECT_LT(secondsSince(start), 5.0);
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    EXPECT_EQ(async, WEFT_ERR_TRANSPORT);
    const auto again = Clock::now();
    EXPECT_EQ(weft_alltoall(comm, x.data(), y, 16, WEFT_FLOAT32, nullptr), WEFT_ERR_TRANSPORT);
    EXPECT_LT(secondsSince(again), 0.5);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  });
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_FALSE(exits[1].exited);
  for (int r : {0, 2}) EXPECT_TRUE(exits[r].exited && exits[r].code == 0) << "rank " << r;
}

// A rank that destroys the communicator and leaves while the others still hold theirs is no fault.
TEST(Faults, ARankThatDestroysAndLeavesIsNoFault) {
  std::vector<RankExit> exits = forkRanks(2, [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    std::vector<float> x(4096, 1.0f);
    WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr));
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 1 is gone by now
    weft_result_t async = WEFT_ERR_INTERNAL;
    WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    EXPECT_EQ(async, WEFT_SUCCESS);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  });
  ASSERT_EQ(exits.size(), 2u);
  for (int r : {0, 1}) EXPECT_TRUE(exits[r].exited && exits[r].code == 0) << "rank " << r;
}

TEST(Faults, AbortFromAnotherThreadEndsAWaitingOpWithinOneSecond) {
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = shortTimeout(30);
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* y = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 1 << 20, &y));
    if (rank == 1) {
      // Never joins; leaves once rank 0 is done.
      std::this_thread::sleep_for(std::chrono::seconds(2));
      WEFT_ASSERT_OK(weft_comm_destroy(comm));
      return;
    }
    std::atomic<int64_t> abortedAtNs{0};
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      abortedAtNs = Clock::now().time_since_epoch().count();
      EXPECT_EQ(weft_comm_abort(comm), WEFT_SUCCESS);
    });
    std::vector<float> x(4096, 2.0f);
    EXPECT_TRUE(
        failsWith(weft_allreduce(comm, x.data(), y, x.size(), WEFT_FLOAT32, nullptr), WEFT_ERR_ABORTED, "abort"));
    const auto returned = Clock::now().time_since_epoch().count();
    aborter.join();
    EXPECT_LT((returned - abortedAtNs.load()) / 1e9, 1.0);
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    EXPECT_EQ(async, WEFT_ERR_ABORTED);
    // Later ops fail at once.
    EXPECT_EQ(weft_alltoall(comm, x.data(), y, 16, WEFT_FLOAT32, nullptr), WEFT_ERR_ABORTED);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(2, body));
}

// More submitting threads than queue slots: back-pressure, never a dropped op. One rank, so the
// threads' interleaving cannot make ranks disagree on op order.
TEST(Faults, FullQueueAppliesBackPressure) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.queue_depth = 2;
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    constexpr int kThreads = 6, kOps = 40, kCount = 5000;
    std::vector<void*> out(kThreads);
    for (auto& p : out) WEFT_ASSERT_OK(weft_mem_alloc(comm, kCount * 4, &p));
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        std::vector<float> x(kCount);
        for (int op = 0; op < kOps; ++op) {
          const uint64_t s = seed + t * 1000 + op;
          fillInput(x.data(), WEFT_FLOAT32, s, 0, 0, kCount);
          if (weft_allreduce(comm, x.data(), out[t], kCount, WEFT_FLOAT32, nullptr) != WEFT_SUCCESS ||
              !checkAllReduce(out[t], WEFT_FLOAT32, s, 1, kCount))
            ++failures;
        }
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(failures.load(), 0);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(1, body));
}

}  // namespace
}  // namespace weft::test
