// ProcessIdentity: what the proxy's watcher and weftctl's liveness rely on to call a peer dead.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

}  // namespace
}  // namespace weft
