// The persistent engine's handover guard on its own (runtime/handover_guard.hpp): an op that no
// worker starts within the limit fails the communicator, naming it (an aborted one keeps its own
// record), stops the kernel and, only once the kernel has left, completes every unfinished op,
// also those published later; an op that started (by its own ticket's claim, not a claim left in
// the slot by the op of `depth` tickets before), or that completes in time, never fires it. The
// kernel is played by hand through the queue's words.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "device/primitives_device.hpp"
#include "runtime/handover_guard.hpp"

namespace weft {
namespace {

constexpr uint64_t kLimitNs = 1000;

uint64_t publish(WorkQueue& q, bool ready) {
  const uint64_t t = q.reserve();
  dev::OpDesc d{};
  d.kind = static_cast<uint32_t>(dev::OpKind::kAllReduce);
  d.nitems = 4;
  EXPECT_EQ(q.publish(t, d, /*hostWaits=*/false, 1000000000), dev::Status::kOk);
  if (ready) q.markReady(t);
  return t;
}

// What a worker does on taking item 0 of `t`, and the last one on completing it.
void start(WorkQueue& q, uint64_t t) {
  prim::atomicStore<prim::Order::kRelaxed>(&q.slots()[t % q.depth()].claim, (t << 32) | 1);
}
void complete(WorkQueue& q, uint64_t t) {
  dev::QueueSlot& s = q.slots()[t % q.depth()];
  prim::atomicStore<prim::Order::kRelease>(&s.done, t + 1);
  prim::atomicStore<prim::Order::kRelease>(&s.free, t + 1);
  prim::atomicStore<prim::Order::kRelease>(&q.header()->completed, t + 1);
}

TEST(HandoverGuard, AnOpNoWorkerStartsFailsTheCommunicatorAndEveryStreamIsReleased) {
  for (const bool handedOver : {false, true}) {
    SCOPED_TRACE(handedOver ? "ready written" : "ready never written");
    WorkQueue q(4);
    int stops = 0;
    HandoverGuard guard(q, kLimitNs, 0, [&] { return ++stops >= 2; });  // the kernel leaves when asked again
    const uint64_t t = publish(q, handedOver);
    const uint64_t behind = publish(q, false);
    EXPECT_FALSE(guard.look(100));
    EXPECT_FALSE(guard.look(100 + kLimitNs - 1));
    EXPECT_EQ(failureStatus(*q.header()), dev::Status::kOk);
    EXPECT_TRUE(guard.look(100 + kLimitNs));
    EXPECT_EQ(stops, 1);
    EXPECT_EQ(failureStatus(*q.header()), dev::Status::kTimeout);
    // The kernel has not left: its ops are not completed under it.
    EXPECT_EQ(q.inFlight(), 2u);
    EXPECT_NE(q.slots()[t % q.depth()].done, t + 1);
    EXPECT_TRUE(guard.look(150 + kLimitNs));
    EXPECT_EQ(stops, 2);
    const dev::WaitRecord* r = firstFailure(*q.header());
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->ticket, t);
    EXPECT_EQ(static_cast<dev::WaitWhat>(r->what), dev::WaitWhat::kHandover);
    EXPECT_EQ(r->observed, handedOver ? t + 1 : 0);
    EXPECT_NE(q.failureText().find("persistent kernel to start the op"), std::string::npos) << q.failureText();
    for (const uint64_t op : {t, behind}) {
      EXPECT_EQ(q.slots()[op % q.depth()].done, op + 1) << "op " << op;
      EXPECT_EQ(static_cast<dev::Status>(q.slots()[op % q.depth()].status), dev::Status::kAborted);
    }
    EXPECT_EQ(q.inFlight(), 0u);
    // An op a submitter published meanwhile: completed at the next look, the kernel gone already.
    const uint64_t late = publish(q, true);
    EXPECT_TRUE(guard.look(200 + kLimitNs));
    EXPECT_EQ(q.slots()[late % q.depth()].done, late + 1);
    EXPECT_EQ(stops, 2);
  }
}

TEST(HandoverGuard, StartedOrTimelyOpsNeverFireIt) {
  WorkQueue q(4);
  int stops = 0;
  HandoverGuard guard(q, kLimitNs, 0, [&] { return ++stops > 0; });
  EXPECT_FALSE(guard.look(0));  // nothing in flight
  // Started: its own waits are the kernel's, bounded; the guard leaves it be however long it runs.
  const uint64_t a = publish(q, true);
  EXPECT_FALSE(guard.look(10));
  start(q, a);
  EXPECT_FALSE(guard.look(10 + 100 * kLimitNs));
  complete(q, a);
  // Each oldest op gets the whole timeout from when the guard first sees it.
  const uint64_t b = publish(q, true);
  EXPECT_FALSE(guard.look(20 * kLimitNs));
  EXPECT_FALSE(guard.look(21 * kLimitNs - 1));
  complete(q, b);
  const uint64_t c = publish(q, true);
  EXPECT_FALSE(guard.look(21 * kLimitNs));
  EXPECT_FALSE(guard.look(22 * kLimitNs - 1));
  start(q, c);
  EXPECT_FALSE(guard.look(30 * kLimitNs));
  complete(q, c);
  EXPECT_EQ(stops, 0);
  EXPECT_EQ(failureStatus(*q.header()), dev::Status::kOk);
}

// Until op t is published its slot still holds the words of op t - depth, claimed and done: neither
// is op t's start.
TEST(HandoverGuard, AnEarlierOpsClaimInTheSlotIsNoStart) {
  WorkQueue q(2);
  HandoverGuard guard(q, kLimitNs, 0, [] { return true; });
  for (int i = 0; i < 2; ++i) {
    const uint64_t t = publish(q, true);
    start(q, t);
    complete(q, t);
  }
  const uint64_t t = q.reserve();
  EXPECT_FALSE(guard.look(0));
  EXPECT_TRUE(guard.look(kLimitNs));
  EXPECT_EQ(q.slots()[t % q.depth()].done, t + 1);
}

// An aborted communicator keeps its own record; its held streams are released all the same.
TEST(HandoverGuard, AnAbortedCommunicatorKeepsItsRecord) {
  WorkQueue q(4);
  HandoverGuard guard(q, kLimitNs, 0, [] { return true; });
  const uint64_t t = publish(q, false);
  prim::atomicStore<prim::Order::kRelease>(&q.header()->abort, 1u);
  EXPECT_FALSE(guard.look(0));
  EXPECT_TRUE(guard.look(kLimitNs));
  EXPECT_EQ(firstFailure(*q.header()), nullptr);
  EXPECT_EQ(q.slots()[t % q.depth()].done, t + 1);
}

// Its thread looks on its own: a stream's wait for an op never started ends within the limit
// and a few periods.
TEST(HandoverGuard, ItsThreadReleasesAWaitWithinTheTimeout) {
  WorkQueue q(4);
  std::atomic<int> stops{0};
  const auto began = std::chrono::steady_clock::now();
  HandoverGuard guard(q, 50000000, 5000000, [&] { return ++stops > 0; });
  const uint64_t t = publish(q, true);
  while (prim::atomicLoad<prim::Order::kAcquire>(&q.slots()[t % q.depth()].done) != t + 1 &&
         std::chrono::steady_clock::now() - began < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  EXPECT_EQ(q.slots()[t % q.depth()].done, t + 1);
  EXPECT_GE(waited, 0.05);
  EXPECT_LT(waited, 5.0);
  EXPECT_EQ(stops.load(), 1);
}

}  // namespace
}  // namespace weft
