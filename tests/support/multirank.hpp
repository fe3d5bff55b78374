// Runs one test body as N ranks, each a separate process (fork), the way real jobs run. A rank's
// process exits 0 when its body recorded no GoogleTest failure; the parent then reports which
// ranks failed. Every run is bounded: ranks still alive at the deadline are killed.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "weft/weft.h"

namespace weft::test {

struct RankExit {
  bool exited = false;  // false: killed by a signal (or by the deadline)
  int code = 0;         // exit status, or signal number
  pid_t pid = -1;       // the rank's process
};

using RankBody = std::function<void(int rank, int nranks, const weft_unique_id_t& id)>;

// Forks `nranks` processes running `body`; returns how each one ended.
std::vector<RankExit> forkRanks(int nranks, const RankBody& body, double timeoutS = 240);

// forkRanks, asserting that every rank exited 0.
::testing::AssertionResult runRanks(int nranks, const RankBody& body, double timeoutS = 240);

// A communicator for `rank`, or a test failure. `config` may be NULL.
weft_comm_t initRank(int rank, int nranks, const weft_unique_id_t& id, const weft_config_t* config = nullptr);

// Asserts `r` is `expected` and weft_get_last_error mentions `mention`.
::testing::AssertionResult failsWith(weft_result_t r, weft_result_t expected, const std::string& mention);

// Deterministic test data: element i of rank r's input for a given seed, uniform in [-1, 1).
float inputValue(uint64_t seed, int rank, uint64_t i);
uint64_t freshSeed();

}  // namespace weft::test

#define WEFT_ASSERT_OK(call)                                                                                           \
  do {                                                                                                                 \
    weft_result_t r_ = (call);                                                                                         \
    ASSERT_EQ(r_, WEFT_SUCCESS) << #call << ": " << weft_get_error_string(r_) << ": " << weft_get_last_error(nullptr); \
  } while (0)
