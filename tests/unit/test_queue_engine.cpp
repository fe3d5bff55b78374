// The work-queue protocol and the persistent engine on one rank, in one process: concurrent
// submitters, more ops than slots, workers racing for items, and the tagged claim word.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "device/cpu/cpu_engine.hpp"
#include "device/engine_device.hpp"
#include "runtime/work_queue.hpp"

namespace weft {
namespace {

using dev::Status;

struct OneRank {
  dev::HeapLayout layout{1, 2, 1024};
  std::vector<uint8_t> heap = std::vector<uint8_t>(layout.controlBytes() + (1 << 20));
  uint8_t* bases[1] = {heap.data()};
  WorkQueue queue;
  dev::CpuEngine engine;

  explicit OneRank(uint32_t depth, int workers) : queue(depth) {
    dev::CommView v;
    v.rank = 0;
    v.nranks = 1;
    v.heap = bases;
    v.layout = layout;
    v.queue = queue.header();
    v.slots = queue.slots();
    v.control = reinterpret_cast<dev::EngineControl*>(heap.data());
    v.timeoutNs = 5'000'000'000ull;
    engine.start(v, workers, 0);
  }
  ~OneRank() {
    prim::atomicStore<prim::Order::kRelease>(&queue.header()->stop, 1u);
    engine.join();
  }
  dev::OpDesc copyOp(const float* src, uint64_t recvOffset, uint64_t count) const {
    dev::OpDesc d{};
    d.kind = static_cast<uint32_t>(dev::OpKind::kAllReduce);
    d.dtype = static_cast<uint32_t>(dev::DType::kFloat32);
    d.count = count;
    d.send = reinterpret_cast<uint64_t>(src);
    d.recv = recvOffset;
    d.grain = 16;
    d.nitems = dev::AllReduceOp::numItems(count, 1, 4, 16);
    return d;
  }
};

TEST(QueueEngine, ConcurrentSubmittersNeverLoseAnOp) {
  OneRank r(/*depth=*/3, /*workers=*/3);
  constexpr int kThreads = 4, kOps = 200, kCount = 100;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<float> src(kCount);
      const uint64_t off = r.layout.controlBytes() + t * kCount * 4;
      auto* out = reinterpret_cast<float*>(r.heap.data() + off);
      for (int op = 0; op < kOps; ++op) {
        for (int i = 0; i < kCount; ++i) src[i] = static_cast<float>(t * 100000 + op * 100 + i);
        const uint64_t ticket = r.queue.reserve();
        if (r.queue.publish(ticket, r.copyOp(src.data(), off, kCount), true, 5'000'000'000ull) != Status::kOk) {
          ++wrong;
          continue;
        }
        r.queue.markReady(ticket);
        if (r.queue.wait(ticket, 5'000'000'000ull, 1'000'000'000ull) != Status::kOk) {
          ++wrong;
          continue;
        }
        for (int i = 0; i < kCount; ++i) wrong += out[i] != src[i];
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(prim::atomicLoad<prim::Order::kAcquire>(&r.queue.header()->completed), uint64_t{kThreads * kOps});
}

TEST(QueueEngine, AsyncOpsFreeTheirSlotsThemselves) {
  OneRank r(2, 2);
  std::vector<float> src(64, 3.0f);
  const uint64_t off = r.layout.controlBytes();
  for (int op = 0; op < 50; ++op) {
    const uint64_t t = r.queue.reserve();
    ASSERT_EQ(r.queue.publish(t, r.copyOp(src.data(), off, 64), false, 5'000'000'000ull), Status::kOk) << op;
    r.queue.markReady(t);
  }
  for (uint32_t spins = 0; prim::atomicLoad<prim::Order::kAcquire>(&r.queue.header()->completed) < 50; ++spins)
    prim::relax(spins);
  EXPECT_EQ(reinterpret_cast<float*>(r.heap.data() + off)[63], 3.0f);
}

TEST(QueueEngine, ClaimWordRejectsAStaleTicket) {
  dev::QueueSlot s{};
  dev::EngineControl control{};
  dev::CommView v;
  v.control = &control;
  s.limit = (uint64_t{7} << 32) | 2;
  control.claim = (uint64_t{6} << 32) | 5;  // the op before, done
  EXPECT_EQ(dev::claimItem(v, s, 3), dev::kNoItem) << "a worker still on ticket 3 must not take ticket 7's item";
  EXPECT_EQ(dev::claimItem(v, s, 7), 0u) << "the first claim of an op starts over the earlier op's count";
  EXPECT_EQ(s.claim, (uint64_t{7} << 32) | 1) << "the slot shows the host that the op started";
  EXPECT_EQ(dev::claimItem(v, s, 7), 1u);
  EXPECT_EQ(dev::claimItem(v, s, 7), dev::kNoItem);
  s.limit = (uint64_t{8} << 32) | 1;
  EXPECT_EQ(dev::claimItem(v, s, 8), 0u);
  s.limit = (uint64_t{7} << 32) | 2;  // a late worker of ticket 7 on a slot not yet refilled
  EXPECT_EQ(dev::claimItem(v, s, 7), dev::kNoItem) << "ticket 8 owns the claims now";
  EXPECT_EQ(control.claim, (uint64_t{8} << 32) | 1);
}

// Workers that learn of an op from readySeen take its item count from the control block, where
// worker 0 mirrored the slot's limit, and never read the slot (host memory on a GPU).
TEST(QueueEngine, ClaimsTakeTheItemCountFromTheMirror) {
  dev::QueueSlot s{};  // limit 0: the slot would say "no items"
  dev::EngineControl control{};
  dev::CommView v;
  v.control = &control;
  control.opLimit = (uint64_t{7} << 32) | 3;
  EXPECT_EQ(dev::claimItem(v, s, 7), 0u);
  EXPECT_EQ(dev::claimItem(v, s, 7), 1u);
  EXPECT_EQ(dev::claimItem(v, s, 7), 2u);
  EXPECT_EQ(dev::claimItem(v, s, 7), dev::kNoItem);
  EXPECT_EQ(dev::claimItem(v, s, 8), dev::kNoItem) << "another ticket's mirror is not this op's count";
}

// The tags are the tickets' low 32 bits: an op past 2^32 tickets still orders against the one
// before it.
TEST(QueueEngine, ClaimWordOrdersTicketsAcrossTheTagWrap) {
  dev::QueueSlot s{};
  dev::EngineControl control{};
  dev::CommView v;
  v.control = &control;
  const uint64_t last = 0xffffffffull, next = 0x100000000ull;
  control.claim = (last << 32) | 1;
  s.limit = (uint64_t{0} << 32) | 1;
  EXPECT_EQ(dev::claimItem(v, s, next), 0u);
  s.limit = (last << 32) | 3;
  EXPECT_EQ(dev::claimItem(v, s, last), dev::kNoItem) << "ticket 2^32 (tag 0) comes after tag 0xffffffff";
}

// Publishes a one-item op on a queue no engine serves.
uint64_t publishWithoutEngine(WorkQueue& q) {
  const uint64_t t = q.reserve();
  dev::OpDesc d{};
  d.nitems = 1;
  EXPECT_EQ(q.publish(t, d, true, 1'000'000'000ull), Status::kOk);
  q.markReady(t);
  return t;
}

TEST(QueueEngine, AbortEndsAHostWaitAndRecordsIt) {
  WorkQueue q(2);
  // No engine: the op can never finish, so only the abort can end the wait.
  const uint64_t t = publishWithoutEngine(q);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    prim::atomicStore<prim::Order::kRelease>(&q.header()->abort, 1u);
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(q.wait(t, 60'000'000'000ull, 100'000'000ull), Status::kAborted);
  aborter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// A wait long enough to sleep lowers the thread's timer slack to 1 us (its 20 us sleeps would
// otherwise last 50 us longer than they ask), and the caller's thread gets its own slack back,
// whatever the end.
TEST(QueueEngine, AWaitThatSleptGivesTheCallerItsTimerSlackBack) {
  constexpr unsigned long kCallers = 123457;
  if (prctl(PR_SET_TIMERSLACK, kCallers, 0UL, 0UL, 0UL) != 0) GTEST_SKIP() << "this system refuses PR_SET_TIMERSLACK";
  WorkQueue q(2);
  const uint64_t t = publishWithoutEngine(q);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // well past the wait's first sleeps
    prim::atomicStore<prim::Order::kRelease>(&q.header()->abort, 1u);
  });
  EXPECT_EQ(q.wait(t, 60'000'000'000ull, 0), Status::kAborted);
  aborter.join();
  EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL), static_cast<long>(kCallers));
  const uint64_t again = publishWithoutEngine(q);
  EXPECT_EQ(q.wait(again, 200'000'000ull, 0), Status::kAborted) << "the abort stands";
  EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL), static_cast<long>(kCallers));
  prctl(PR_SET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);  // the default again
}

TEST(QueueEngine, CompletingUnfinishedOpsReleasesEveryWaiter) {
  WorkQueue q(4);
  const uint64_t a = publishWithoutEngine(q), b = publishWithoutEngine(q);
  EXPECT_EQ(q.inFlight(), 2u);
  q.completeUnfinished();
  EXPECT_EQ(q.inFlight(), 0u);
  EXPECT_EQ(q.wait(a, 1'000'000'000ull, 0), Status::kAborted);
  EXPECT_EQ(*q.doneWord(b), b + 1) << "a stream waiting on b's done word would be released";
}

TEST(QueueEngine, AStalledEngineIsATimeoutNamingTheOp) {
  WorkQueue q(2);
  const uint64_t t = publishWithoutEngine(q);
  EXPECT_EQ(q.wait(t, 200'000'000ull, 100'000'000ull), Status::kTimeout);
  EXPECT_NE(q.failureText().find("the engine to finish the op"), std::string::npos) << q.failureText();
}

// A descriptor of a kind the engine does not run (one from another build, say) fails its op,
// naming the kind, instead of completing with its output never written; a marker (kNop) is fine.
TEST(QueueEngine, AnOpKindTheEngineDoesNotRunFailsNamingIt) {
  OneRank r(/*depth=*/2, /*workers=*/2);
  const auto run = [&](uint32_t kind) {
    dev::OpDesc d{};
    d.kind = kind;
    d.nitems = 1;
    const uint64_t ticket = r.queue.reserve();
    EXPECT_EQ(r.queue.publish(ticket, d, true, 5'000'000'000ull), Status::kOk);
    r.queue.markReady(ticket);
    return r.queue.wait(ticket, 5'000'000'000ull, 1'000'000'000ull);
  };
  EXPECT_EQ(run(static_cast<uint32_t>(dev::OpKind::kNop)), Status::kOk);
  EXPECT_EQ(run(99), Status::kBadInput);
  const std::string text = r.queue.failureText();
  EXPECT_NE(text.find("does not run op kind 99"), std::string::npos) << text;
}

// A split GEMM wave's owner waits on a range of its own rank's blocks, not on a peer rank.
TEST(QueueEngine, AStalledSplitGemmPartIsNamedAsThisRanksRange) {
  WorkQueue q(2);
  dev::CommView v;
  v.queue = q.header();
  dev::recordFailure(v, dev::WaitSite{7, 300, 41, dev::WaitWhat::kPartial}, Status::kTimeout, 12, 11);
  const std::string text = q.failureText();
  EXPECT_NE(text.find("range 41 of this rank's split GEMM wave for its partial sums"), std::string::npos) << text;
  EXPECT_EQ(text.find("waiting on rank 41"), std::string::npos) << text;
}

// Host threads claim a failure on the header's host words and only store `error`, never swap it:
// kernels swap it, and a CPU's CAS is not atomic with a GPU's on PCIe hosts. A kernel's later
// failure then claims nothing; both records stay whole.
TEST(QueueEngine, HostFailuresNeverSwapTheKernelsWord) {
  WorkQueue q(2);
  q.failTransport(3);
  const dev::QueueHeader& h = *q.header();
  EXPECT_EQ(h.hostError, static_cast<uint32_t>(Status::kTransport));
  EXPECT_EQ(h.hostRecordValid, 1u);
  EXPECT_EQ(h.hostRecord.peer, 3);
  EXPECT_EQ(h.error, static_cast<uint32_t>(Status::kTransport)) << "every wait must see the failure";
  EXPECT_EQ(h.recordValid, 0u) << "the kernels' record is theirs alone";

  dev::EngineControl control{};
  dev::CommView engine;
  engine.queue = q.header();
  engine.control = &control;
  EXPECT_FALSE(dev::recordFailure(engine, dev::WaitSite{5, 1, 2, dev::WaitWhat::kInboxData}, Status::kTimeout, 9, 8));
  EXPECT_EQ(failureStatus(h), Status::kTransport);
  EXPECT_EQ(firstFailure(h), &h.hostRecord);
  EXPECT_EQ(h.hostRecord.peer, 3);
}

// A kernel that claimed first is the communicator's first failure; the host's record, made after,
// stays beside it and does not change what is reported.
TEST(QueueEngine, AKernelsEarlierFailureIsReportedOverTheHosts) {
  WorkQueue q(2);
  dev::EngineControl control{};
  dev::CommView engine;
  engine.queue = q.header();
  engine.control = &control;
  EXPECT_TRUE(dev::recordFailure(engine, dev::WaitSite{5, 1, 2, dev::WaitWhat::kInboxData}, Status::kTimeout, 9, 8));
  q.failPeerGone(1, 4242, kGoneSeenByRank);
  const dev::QueueHeader& h = *q.header();
  EXPECT_EQ(h.hostRecordValid, 1u);
  EXPECT_EQ(h.error, static_cast<uint32_t>(Status::kTimeout));
  EXPECT_EQ(failureStatus(h), Status::kTimeout);
  EXPECT_EQ(firstFailure(h), &h.record);
  EXPECT_NE(q.failureText().find("waiting on rank 2"), std::string::npos) << q.failureText();
  // Only the host's first failure is recorded among host threads.
  q.failTransport(0);
  EXPECT_EQ(h.hostRecord.peer, 1);
}

}  // namespace
}  // namespace weft
