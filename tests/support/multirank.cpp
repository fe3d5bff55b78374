#include "multirank.hpp"

#include "device/testdata_device.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

namespace weft::test {

namespace {

// Failed assertions of the running test so far.
int failedParts() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (!info) return ::testing::Test::HasFailure() ? 1 : 0;
  const ::testing::TestResult* result = info->result();
  int failed = 0;
  for (int i = 0; i < result->total_part_count(); ++i) failed += result->GetTestPartResult(i).failed();
  return failed;
}

}  // namespace

std::vector<RankExit> forkRanks(int nranks, const RankBody& body, double timeoutS) {
  weft_unique_id_t id;
  if (weft_get_unique_id(&id) != WEFT_SUCCESS) {
    ADD_FAILURE() << "weft_get_unique_id: " << weft_get_last_error(nullptr);
    return {};
  }
  fflush(stdout);
  fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    const int failedBefore = failedParts();
    pid_t pid = fork();
    if (pid == 0) {
      body(r, nranks, id);
      fflush(stdout);
      fflush(stderr);
      // Only this rank's own failures: a failure the parent recorded before forking (an earlier
      // round of the same test) must not make every later rank exit 1 as well.
      _exit(failedParts() > failedBefore ? 1 : 0);
    }
    if (pid < 0) {
      ADD_FAILURE() << "fork failed";
      break;
    }
    pids.push_back(pid);
  }
  std::vector<RankExit> exits(nranks);
  for (size_t r = 0; r < pids.size(); ++r) exits[r].pid = pids[r];
  std::vector<bool> done(pids.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutS);
  for (size_t left = pids.size(); left > 0;) {
    for (size_t r = 0; r < pids.size(); ++r) {
      int status = 0;
      if (done[r] || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      done[r] = true;
      --left;
      exits[r].exited = WIFEXITED(status);
      exits[r].code = WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status);
    }
    if (left && std::chrono::steady_clock::now() > deadline) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (!done[r]) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          exits[r] = RankExit{false, SIGKILL};
          ADD_FAILURE() << "rank " << r << " still running after " << timeoutS << " s; killed";
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return exits;
}

::testing::AssertionResult runRanks(int nranks, const RankBody& body, double timeoutS) {
  const std::vector<RankExit> exits = forkRanks(nranks, body, timeoutS);
  if (static_cast<int>(exits.size()) != nranks) return ::testing::AssertionFailure() << "could not start the ranks";
  auto result = ::testing::AssertionSuccess();
  bool ok = true;
  std::string why;
  for (int r = 0; r < nranks; ++r) {
    if (exits[r].exited && exits[r].code == 0) continue;
    ok = false;
    why += " rank " + std::to_string(r) +
           (exits[r].exited ? " failed" : " died by signal " + std::to_string(exits[r].code)) + ";";
  }
  return ok ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << why;
}

weft_comm_t initRank(int rank, int nranks, const weft_unique_id_t& id, const weft_config_t* config) {
  weft_comm_t comm = nullptr;
  weft_result_t r = weft_comm_init_rank(&comm, nranks, id, rank, config);
  EXPECT_EQ(r, WEFT_SUCCESS) << "rank " << rank << ": " << weft_get_last_error(nullptr);
  return comm;
}

::testing::AssertionResult failsWith(weft_result_t r, weft_result_t expected, const std::string& mention) {
  const std::string msg = weft_get_last_error(nullptr);
  if (r != expected)
    return ::testing::AssertionFailure() << "returned " << weft_get_error_string(r) << " (\"" << msg << "\"), expected "
                                         << weft_get_error_string(expected);
  if (msg.find(mention) == std::string::npos)
    return ::testing::AssertionFailure() << "last error \"" << msg << "\" does not mention \"" << mention << "\"";
  return ::testing::AssertionSuccess();
}

float inputValue(uint64_t seed, int rank, uint64_t i) { return dev::testValue(seed, rank, i); }

uint64_t freshSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

}  // namespace weft::test
