// The status watch on its own (runtime/status_watch.hpp): what the GPU engines' words say becomes
// the page's items done, ends, history and counters, for both engines, with more ops in flight
// than the queue has slots, and when the communicator fails. The engines are played by hand: a
// count for the launched one, the queue's slots for the persistent one.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "runtime/status_read.hpp"
#include "runtime/status_watch.hpp"

namespace weft {
namespace {

using status::Snapshot;

struct Fixture {
  explicit Fixture(uint32_t depth) : queue(depth) {
    char tmpl[] = "/tmp/weft-watch-unit-XXXXXX";
    root = mkdtemp(tmpl);
    status::Identity id;
    id.commId = 42;
    id.rank = 0;
    id.nranks = 2;
    id.host = "host";
    id.device = "gpu";
    id.engine = "test";
    id.paths = {transport::Path::kSelf, transport::Path::kP2p};
    page = status::Page::create(root + "/pages", id, depth);
  }
  ~Fixture() {
    page.reset();
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  // Submits an op of `items` items as the communicator does on a GPU.
  void submit(StatusWatch& w, uint64_t ticket, uint32_t items, dev::OpKind kind = dev::OpKind::kAllReduce) {
    dev::OpDesc d{};
    d.kind = static_cast<uint32_t>(kind);
    d.nitems = items;
    d.count = 100 + ticket;
    w.submitted(page->submitted(ticket, d, 4 * (100 + ticket), /*onStream=*/true, items));
  }
  Snapshot read() const {
    const status::Listing l = status::readDirectory(root + "/pages");
    EXPECT_TRUE(l.refused.empty());
    EXPECT_EQ(l.pages.size(), 1u);
    return l.pages.empty() ? Snapshot{} : l.pages[0];
  }
  // The live words of in-flight op `ticket` (nullopt where it is not in flight).
  static std::optional<SlotProgress> progressOf(const Snapshot& s, uint64_t ticket) {
    for (size_t i = 0; i < s.inFlight.size(); ++i)
      if (s.inFlight[i].ticket == ticket) return s.progress[i];
    return std::nullopt;
  }
  std::string root;
  WorkQueue queue;
  std::unique_ptr<status::Page> page;
};

constexpr auto kAllReduce = static_cast<int>(dev::OpKind::kAllReduce);

TEST(StatusWatch, LaunchedCountCoversTheOldestOpsFirst) {
  Fixture f(8);
  ASSERT_NE(f.page, nullptr);
  std::optional<uint64_t> count = 0;
  StatusWatch w(
      *f.page, f.queue, [&] { return count; }, std::chrono::milliseconds(0));
  f.submit(w, 0, 4);
  f.submit(w, 1, 2);
  f.submit(w, 2, 3);
  w.poll();
  Snapshot s = f.read();
  ASSERT_EQ(s.inFlight.size(), 3u);
  EXPECT_EQ(s.inFlight[0].nitems, 4u);
  EXPECT_EQ(Fixture::progressOf(s, 0)->itemsDone, 0u);
  EXPECT_EQ(Fixture::progressOf(s, 0)->startNs, 0u) << "nothing counted: not started";

  count = 3;
  w.poll();
  s = f.read();
  ASSERT_EQ(s.inFlight.size(), 3u);
  EXPECT_EQ(Fixture::progressOf(s, 0)->itemsDone, 3u);
  EXPECT_NE(Fixture::progressOf(s, 0)->startNs, 0u);
  EXPECT_EQ(Fixture::progressOf(s, 1)->itemsDone, 0u);

  count = 7;  // ops 0 and 1 whole, one item of op 2
  w.poll();
  s = f.read();
  ASSERT_EQ(s.inFlight.size(), 1u);
  EXPECT_EQ(s.inFlight[0].ticket, 2u);
  EXPECT_EQ(Fixture::progressOf(s, 2)->itemsDone, 1u);
  ASSERT_EQ(s.history.size(), 2u);
  EXPECT_EQ(s.history[0].ticket, 0u);
  EXPECT_EQ(s.history[1].ticket, 1u);
  EXPECT_EQ(s.history[1].status, static_cast<uint32_t>(dev::Status::kOk));
  EXPECT_EQ(s.header.ended, 2u);
  EXPECT_EQ(s.header.counters.ops[kAllReduce], 2u);

  count = std::nullopt;  // a read that did not complete changes nothing
  w.poll();
  EXPECT_EQ(f.read().header.ended, 2u);

  count = 9;
  w.poll();
  s = f.read();
  EXPECT_TRUE(s.inFlight.empty());
  EXPECT_EQ(s.header.ended, 3u);
  EXPECT_EQ(s.header.state, static_cast<uint32_t>(status::PageState::kRunning));
  EXPECT_EQ(w.inFlight(), 0u);
}

// A stream may hold far more launched ops than the queue has slots: each still ends once, in the
// history and the counters, although its slot's row went to a later op long before.
TEST(StatusWatch, MoreOpsInFlightThanSlotsAllEnd) {
  Fixture f(4);
  ASSERT_NE(f.page, nullptr);
  std::optional<uint64_t> count = 0;
  StatusWatch w(
      *f.page, f.queue, [&] { return count; }, std::chrono::milliseconds(0));
  for (uint64_t t = 0; t < 10; ++t) f.submit(w, t, 2);
  EXPECT_EQ(w.inFlight(), 10u);
  count = 2 * 9 + 1;
  w.poll();
  Snapshot s = f.read();
  EXPECT_EQ(s.header.ended, 9u);
  EXPECT_EQ(s.header.counters.ops[kAllReduce], 9u);
  uint64_t bytes = 0;
  for (uint64_t t = 0; t < 9; ++t) bytes += 4 * (100 + t);
  EXPECT_EQ(s.header.counters.bytes[kAllReduce], bytes) << "each op's own row, not its slot's";
  ASSERT_EQ(s.inFlight.size(), 1u);
  EXPECT_EQ(s.inFlight[0].ticket, 9u);
  EXPECT_EQ(Fixture::progressOf(s, 9)->itemsDone, 1u);
  EXPECT_EQ(s.history.back().ticket, 8u);
}

// The first op the count does not cover failed; the ops behind it give up.
TEST(StatusWatch, LaunchedFailureEndsTheOpInFlightAndTheRest) {
  Fixture f(8);
  ASSERT_NE(f.page, nullptr);
  std::optional<uint64_t> count = 0;
  StatusWatch w(
      *f.page, f.queue, [&] { return count; }, std::chrono::milliseconds(0));
  for (uint64_t t = 0; t < 3; ++t) f.submit(w, t, 4);
  count = 4 + 1;
  dev::QueueHeader* h = f.queue.header();
  h->record = dev::WaitRecord{
      1, 0, 1, static_cast<uint32_t>(dev::WaitWhat::kInboxData), static_cast<uint32_t>(dev::Status::kTimeout), 1, 0};
  h->recordValid = 1;
  h->error = static_cast<uint32_t>(dev::Status::kTimeout);
  w.poll();
  const Snapshot s = f.read();
  EXPECT_TRUE(s.inFlight.empty());
  ASSERT_EQ(s.history.size(), 3u);
  EXPECT_EQ(s.history[0].status, static_cast<uint32_t>(dev::Status::kOk));
  EXPECT_EQ(s.history[1].status, static_cast<uint32_t>(dev::Status::kTimeout));
  EXPECT_EQ(s.history[2].status, static_cast<uint32_t>(dev::Status::kPeerFailed));
  EXPECT_EQ(s.header.state, static_cast<uint32_t>(status::PageState::kFailed));
  EXPECT_EQ(s.header.counters.timeouts, 1u);
  EXPECT_EQ(s.header.counters.errors, 1u);
  ASSERT_TRUE(s.header.failureValid);
  EXPECT_EQ(s.header.failure.peer, 1);
}

// The persistent engine's slots: items finished while the op runs, then done and its status.
TEST(StatusWatch, PersistentSlotsGiveProgressAndStatus) {
  Fixture f(4);
  ASSERT_NE(f.page, nullptr);
  StatusWatch w(*f.page, f.queue, nullptr, std::chrono::milliseconds(0));
  f.submit(w, 0, 6);
  f.submit(w, 1, 2);
  w.poll();
  Snapshot s = f.read();
  EXPECT_EQ(Fixture::progressOf(s, 0)->startNs, 0u) << "not ready: the stream has not reached it";

  dev::QueueSlot* slots = f.queue.slots();
  slots[0].ready = 1;
  slots[0].claim = 4;  // four items taken, ticket 0's tag
  slots[0].finished = 3;
  w.poll();
  s = f.read();
  EXPECT_EQ(Fixture::progressOf(s, 0)->itemsDone, 3u);
  EXPECT_NE(Fixture::progressOf(s, 0)->startNs, 0u);
  EXPECT_EQ(s.header.ended, 0u);

  slots[0].finished = 6;
  slots[0].done = 1;
  slots[1].ready = 2;
  slots[1].status = static_cast<uint32_t>(dev::Status::kBadInput);
  slots[1].done = 2;
  w.poll();
  s = f.read();
  EXPECT_TRUE(s.inFlight.empty());
  ASSERT_EQ(s.history.size(), 2u);
  EXPECT_EQ(s.history[0].status, static_cast<uint32_t>(dev::Status::kOk));
  EXPECT_EQ(s.history[1].status, static_cast<uint32_t>(dev::Status::kBadInput));
  EXPECT_EQ(s.header.counters.errors, 1u);

  // A slot that went on to a later ticket: the op had completed.
  f.submit(w, 2, 1);
  slots[2].ready = 7;
  slots[2].done = 7;  // ticket 6 (2 + 4 slots) already done there
  w.poll();
  EXPECT_EQ(f.read().header.ended, 3u);
}

TEST(StatusWatch, ItsThreadKeepsThePageCurrent) {
  Fixture f(8);
  ASSERT_NE(f.page, nullptr);
  std::atomic<uint64_t> count{0};
  StatusWatch w(
      *f.page, f.queue, [&]() -> std::optional<uint64_t> { return count.load(); }, std::chrono::milliseconds(2));
  f.submit(w, 0, 100);
  auto waitFor = [&](auto&& done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done(f.read()) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return done(f.read());
  };
  count = 40;
  EXPECT_TRUE(waitFor([](const Snapshot& s) {
    const auto p = Fixture::progressOf(s, 0);
    return p && p->itemsDone == 40;
  }));
  count = 100;
  EXPECT_TRUE(waitFor([](const Snapshot& s) { return s.header.ended == 1; }));
}

}  // namespace
}  // namespace weft
