// weftd's reaper (runtime/service/reaper.hpp): a job whose workers are slow to stop holds up no
// other job and not the caller; its memory goes only after its join; destruction waits for all.
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/service/reaper.hpp"

namespace weft::service {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The tickets done within `timeoutS`, waiting on the reaper's descriptor as weftd's loop does.
std::vector<uint64_t> doneWithin(Reaper& r, double timeoutS, size_t want) {
  std::vector<uint64_t> all;
  const auto start = Clock::now();
  while (all.size() < want && since(start) < timeoutS) {
    pollfd p{r.fd(), POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    for (uint64_t t : r.takeDone()) all.push_back(t);
  }
  return all;
}

TEST(ServiceReaper, ASlowJoinHoldsUpNoOtherJob) {
  Reaper r;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto slowMemory = std::make_shared<int>(1);
  std::weak_ptr<int> slowSeen = slowMemory;
  const auto start = Clock::now();
  // The slow job's workers stop only when the test says (at most 10 s).
  r.retire({[released] { return released.wait_for(std::chrono::seconds(10)) == std::future_status::ready; },
            {std::move(slowMemory)},
            1});
  r.retire({[] { return true; }, {}, 2});
  r.retire({nullptr, {}, 3});
  EXPECT_LT(since(start), 0.1) << "retire waited for a join";
  std::vector<uint64_t> done = doneWithin(r, 5, 2);
  std::sort(done.begin(), done.end());
  EXPECT_EQ(done, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(r.pending(), 1u);
  // What the slow job's workers may touch is still there until they have gone.
  EXPECT_FALSE(slowSeen.expired());
  release.set_value();
  EXPECT_EQ(doneWithin(r, 5, 1), (std::vector<uint64_t>{1}));
  EXPECT_EQ(r.pending(), 0u);
  // Joined, it is handed back to the loop, which frees it when no kernel runs (CommRegistry::reclaim).
  EXPECT_FALSE(slowSeen.expired());
  std::vector<std::shared_ptr<void>> joined = r.takeJoined();
  EXPECT_EQ(joined.size(), 1u);
  EXPECT_TRUE(r.takeJoined().empty());
  joined.clear();
  EXPECT_TRUE(slowSeen.expired());
  EXPECT_EQ(r.stuck(), 0u);
}

TEST(ServiceReaper, DestructionWaitsForEveryJob) {
  std::atomic<int> joined{0};
  auto memory = std::make_shared<int>(1);
  std::weak_ptr<int> seen = memory;
  {
    Reaper r;
    for (int i = 0; i < 4; ++i)
      r.retire({[&joined] {
                  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // workers finishing an item
                  ++joined;
                  return true;
                },
                {memory},
                0});
    memory.reset();
  }
  EXPECT_EQ(joined.load(), 4);
  EXPECT_TRUE(seen.expired());
}

// Workers that did not stop (a GPU kernel that stayed) may still touch the job's memory: it is
// never let go, while the ticket is still reported (the rank is told; weftd goes on).
TEST(ServiceReaper, MemoryOfWorkersThatDidNotStopIsKept) {
  auto memory = std::make_shared<int>(1);
  std::weak_ptr<int> seen = memory;
  {
    Reaper r;
    r.retire({[] { return false; }, {std::move(memory)}, 7});
    EXPECT_EQ(doneWithin(r, 5, 1), (std::vector<uint64_t>{7}));
    EXPECT_TRUE(r.takeJoined().empty());
    EXPECT_EQ(r.stuck(), 1u);  // weftd frees nothing more: that kernel may be running for good
  }
  EXPECT_FALSE(seen.expired());
}

}  // namespace
}  // namespace weft::service
