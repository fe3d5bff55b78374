// The persistent engine's handover guard on its own (runtime/handover_guard.hpp): an op that no
// worker starts within the timeout fails the communicator, naming it, stops the kernel once and
// completes every unfinished op, also those published later; an op that started, or that
// completes in time, never fires it. The kernel is played by hand through the queue's words.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "device/primitives_device.hpp"
#include "runtime/handover_guard.hpp"

namespace weft {
namespace {

constexpr uint64_t kTimeoutNs = 1000;

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
    HandoverGuard guard(q, kTimeoutNs, 0, [&] { ++stops; });
    const uint64_t t = publish(q, handedOver);
    const uint64_t behind = publish(q, false);
    EXPECT_FALSE(guard.look(100));
    EXPECT_FALSE(guard.look(100 + kTimeoutNs - 1));
    EXPECT_EQ(failureStatus(*q.header()), dev::Status::kOk);
    EXPECT_TRUE(guard.look(100 + kTimeoutNs));
    EXPECT_EQ(stops, 1);
    EXPECT_EQ(failureStatus(*q.header()), dev::Status::kTimeout);
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
    // An op a submitter published meanwhile: completed at the next look, the kernel told once.
    const uint64_t late = publish(q, true);
    EXPECT_TRUE(guard.look(200 + kTimeoutNs));
    EXPECT_EQ(q.slots()[late % q.depth()].done, late + 1);
    EXPECT_EQ(stops, 1);
  }
}

TEST(HandoverGuard, StartedOrTimelyOpsNeverFireIt) {
  WorkQueue q(4);
  int stops = 0;
  HandoverGuard guard(q, kTimeoutNs, 0, [&] { ++stops; });
  EXPECT_FALSE(guard.look(0));  // nothing in flight
  // Started: its own waits are the kernel's, bounded; the guard leaves it be however long it runs.
  const uint64_t a = publish(q, true);
  EXPECT_FALSE(guard.look(10));
  start(q, a);
  EXPECT_FALSE(guard.look(10 + 100 * kTimeoutNs));
  complete(q, a);
  // Each oldest op gets the whole timeout from when the guard first sees it.
  const uint64_t b = publish(q, true);
  EXPECT_FALSE(guard.look(20 * kTimeoutNs));
  EXPECT_FALSE(guard.look(21 * kTimeoutNs - 1));
  complete(q, b);
  const uint64_t c = publish(q, true);
  EXPECT_FALSE(guard.look(21 * kTimeoutNs));
  EXPECT_FALSE(guard.look(22 * kTimeoutNs - 1));
  start(q, c);
  EXPECT_FALSE(guard.look(30 * kTimeoutNs));
  complete(q, c);
  EXPECT_EQ(stops, 0);
  EXPECT_EQ(failureStatus(*q.header()), dev::Status::kOk);
}

// Its thread looks on its own: a stream's wait for an op never started ends within the timeout
// and a few periods.
TEST(HandoverGuard, ItsThreadReleasesAWaitWithinTheTimeout) {
  WorkQueue q(4);
  std::atomic<int> stops{0};
  const auto began = std::chrono::steady_clock::now();
  HandoverGuard guard(q, 50000000, 5000000, [&] { ++stops; });
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
