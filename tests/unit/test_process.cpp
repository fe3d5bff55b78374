// ProcessIdentity: what the proxy's watcher and weftctl's liveness rely on to call a peer dead.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/process.hpp"

namespace weft {
namespace {

TEST(Process, ThisProcessIsKnownAndAlive) {
  const ProcessIdentity me = thisProcess();
  EXPECT_EQ(me.pid, getpid());
  EXPECT_NE(me.start, 0u);
  EXPECT_NE(me.pidNamespace, 0u);
  EXPECT_EQ(processStart(me.pid), me.start);
  EXPECT_FALSE(processEnded(me));
  EXPECT_FALSE(processEnded(ProcessIdentity{}));  // no pid: nothing to watch
}

TEST(Process, AKilledChildHasEndedBeforeAndAfterItIsReaped) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  const ProcessIdentity p{child, processStart(child), thisProcess().pidNamespace};
  EXPECT_FALSE(processEnded(p));
  // Another process that got this pid started later: not the one watched.
  EXPECT_TRUE(processEnded(ProcessIdentity{child, p.start + 1, p.pidNamespace}));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  // A zombie until reaped: kill(pid, 0) still succeeds, but it has ended.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, child, &info, WEXITED | WNOWAIT), 0);
  EXPECT_TRUE(processEnded(p));
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(processEnded(p));
}

// The watch reports a process of this host that ends, once, and leaves alone what it cannot judge:
// this process, another host's pid, a pid of 0.
TEST(Process, TheWatchReportsAnEndedChildOnceAndIgnoresWhatItCannotJudge) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  const ProcessIdentity me = thisProcess();
  ProcessIdentity other = me;
  other.host ^= 1;  // a pid of another host means nothing here
  const ProcessIdentity kid{child, processStart(child), me.pidNamespace, me.host};
  EXPECT_TRUE(watchable(kid));
  EXPECT_FALSE(watchable(me));
  EXPECT_FALSE(watchable(other));
  EXPECT_FALSE(ProcessWatch::anyWatchable({me, other, ProcessIdentity{}}));
  std::mutex m;
  std::vector<int> ended;
  std::atomic<int> looks{0};
  {
    ProcessWatch watch(
        {me, other, kid}, std::chrono::milliseconds(5),
        [&](int i, const ProcessIdentity& p) {
          std::lock_guard<std::mutex> lock(m);
          ended.push_back(i);
          EXPECT_EQ(p.pid, child);
          return true;
        },
        [&] { ++looks; });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    {
      std::lock_guard<std::mutex> lock(m);
      EXPECT_TRUE(ended.empty());
    }
    ASSERT_EQ(kill(child, SIGKILL), 0);
    for (int i = 0; i < 200; ++i) {
      {
        std::lock_guard<std::mutex> lock(m);
        if (!ended.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a second report would come by now
  }
  EXPECT_EQ(ended, std::vector<int>{2});
  EXPECT_GT(looks.load(), 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
}

}  // namespace
}  // namespace weft
