// The status page on its own: what the writer records reads back, a reader beside a busy writer
// only ever gets consistent copies, damaged pages are refused (never trusted, never a crash), and
// the directory rules hold.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "runtime/status_read.hpp"

namespace weft::status {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/weft-page-unit-XXXXXX";
    root = mkdtemp(tmpl);
    pages = root + "/pages";
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  std::string root, pages;
};

Identity identity(int rank, int nranks) {
  Identity id;
  id.commId = 0x1234abcd5678ef90ull;
  id.rank = rank;
  id.nranks = nranks;
  id.host = "host";
  id.device = "cpu";
  id.engine = "2 CPU worker thread(s)";
  for (int r = 0; r < nranks; ++r) id.paths.push_back(r == rank ? transport::Path::kSelf : transport::Path::kP2p);
  return id;
}

dev::OpDesc allReduce(uint64_t count) {
  dev::OpDesc d{};
  d.kind = static_cast<uint32_t>(dev::OpKind::kAllReduce);
  d.count = count;
  d.nitems = 8;
  return d;
}

TEST(StatusPage, WhatTheWriterRecordsReadsBack) {
  TempDir dir;
  auto page = Page::create(dir.pages, identity(1, 3), 4);
  ASSERT_NE(page, nullptr);
  struct stat st {};
  ASSERT_EQ(stat(dir.pages.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  dev::QueueHeader queue{};
  for (uint64_t t = 0; t < 6; ++t) {
    page->submitted(t, allReduce(100 + t), 400 + 4 * t, false, 8);
    page->ended(t, dev::Status::kOk, &queue);
  }
  page->submitted(6, allReduce(7), 28, false, 8);
  const Listing l = readDirectory(dir.pages);
  ASSERT_TRUE(l.refused.empty()) << l.refused.front().why;
  ASSERT_EQ(l.pages.size(), 1u);
  const Snapshot& s = l.pages[0];
  EXPECT_EQ(fs::status(dir.pages + "/" + s.name).permissions(), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_TRUE(s.alive);
  EXPECT_EQ(s.header.rank, 1);
  EXPECT_EQ(s.header.nranks, 3);
  EXPECT_EQ(s.header.pid, getpid());
  EXPECT_STREQ(s.header.engine, "2 CPU worker thread(s)");
  EXPECT_EQ(s.header.submitted, 7u);
  EXPECT_EQ(s.header.ended, 6u);
  EXPECT_EQ(s.header.counters.ops[static_cast<int>(dev::OpKind::kAllReduce)], 6u);
  EXPECT_EQ(s.header.counters.bytes[static_cast<int>(dev::OpKind::kAllReduce)], 6 * 400u + 4 * 15u);
  ASSERT_EQ(s.inFlight.size(), 1u);
  EXPECT_EQ(s.inFlight[0].ticket, 6u);
  EXPECT_EQ(s.inFlight[0].count, 7u);
  EXPECT_EQ(s.rowState(0), "queued");
  ASSERT_EQ(s.history.size(), 6u);
  EXPECT_EQ(s.history.front().ticket, 0u);
  EXPECT_EQ(s.history.back().ticket, 5u);
  ASSERT_EQ(s.paths.size(), 3u);
  EXPECT_EQ(s.paths[1], transport::Path::kSelf);
  // A failure copies the queue's record once; abort removes the file.
  queue.record = dev::WaitRecord{6, 3, 2, static_cast<uint32_t>(dev::WaitWhat::kInboxData), 1, 5, 4};
  queue.recordValid = 1;
  page->ended(6, dev::Status::kTimeout, &queue);
  const Listing failed = readDirectory(dir.pages);
  ASSERT_EQ(failed.pages.size(), 1u);
  EXPECT_EQ(failed.pages[0].header.state, static_cast<uint32_t>(PageState::kFailed));
  EXPECT_EQ(failed.pages[0].header.counters.timeouts, 1u);
  EXPECT_EQ(failed.pages[0].header.failure.peer, 2);
  page->aborted();
  EXPECT_TRUE(readDirectory(dir.pages).pages.empty());
}

// A rank with proxy peers: every update copies the proxy's counts; a page without says none.
TEST(StatusPage, EveryUpdateCopiesTheProxysCounts) {
  TempDir dir;
  auto page = Page::create(dir.pages, identity(0, 2), 4);
  ASSERT_NE(page, nullptr);
  EXPECT_EQ(readDirectory(dir.pages).pages.at(0).header.proxied, 0u);
  uint64_t sent = 0;
  page->countProxyTraffic([&sent] { return ProxyCounts{3 * sent, 2 * sent, sent, sent / 2}; });
  dev::QueueHeader queue{};
  for (uint64_t t = 0; t < 3; ++t) {
    sent = 10 * (t + 1);
    page->submitted(t, allReduce(100), 400, false, 8);
    page->ended(t, dev::Status::kOk, &queue);
  }
  const Listing l = readDirectory(dir.pages);
  ASSERT_EQ(l.pages.size(), 1u);
  const PageHeader& h = l.pages[0].header;
  EXPECT_EQ(h.proxied, 1u);
  EXPECT_EQ(h.proxy.parts, 90u);
  EXPECT_EQ(h.proxy.messages, 60u);
  EXPECT_EQ(h.proxy.batches, 30u);
  EXPECT_EQ(h.proxy.writes, 15u);
}

TEST(StatusPage, DestroyRemovesThePage) {
  TempDir dir;
  auto page = Page::create(dir.pages, identity(0, 1), 2);
  ASSERT_NE(page, nullptr);
  EXPECT_EQ(readDirectory(dir.pages).pages.size(), 1u);
  page.reset();
  EXPECT_TRUE(fs::is_empty(dir.pages));
}

TEST(StatusPage, ReadsBesideABusyWriterAreConsistent) {
  TempDir dir;
  auto page = Page::create(dir.pages, identity(0, 2), 8);
  ASSERT_NE(page, nullptr);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    dev::QueueHeader queue{};
    // Ops as fast as a host submits small ones back to back.
    for (uint64_t t = 0; !stop; ++t) {
      page->submitted(t, allReduce(t), t, false, 8);
      page->ended(t, dev::Status::kOk, &queue);
      std::this_thread::sleep_for(std::chrono::microseconds(10));
    }
  });
  uint64_t lastEnded = 0;
  for (int i = 0; i < 300; ++i) {
    const Listing l = readDirectory(dir.pages);
    EXPECT_TRUE(l.refused.empty()) << l.refused.front().why;
    if (l.pages.size() != 1) {
      ADD_FAILURE() << "no page read";
      break;
    }
    const PageHeader& h = l.pages[0].header;
    // Consistent: every op submitted has ended or is the one in flight, and counts only grow.
    EXPECT_TRUE(h.submitted == h.ended || h.submitted == h.ended + 1) << h.submitted << " " << h.ended;
    EXPECT_EQ(h.counters.ops[static_cast<int>(dev::OpKind::kAllReduce)], h.ended);
    EXPECT_GE(h.ended, lastEnded);
    lastEnded = h.ended;
  }
  stop = true;
  writer.join();
}

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Random damage anywhere in the page: readPage accepts it or refuses it, and never crashes (run
// under the sanitizers, it also never reads out of bounds).
TEST(StatusPage, DamagedPagesAreRefusedOrReadNeverCrash) {
  TempDir dir;
  auto page = Page::create(dir.pages, identity(0, 4), 4);
  ASSERT_NE(page, nullptr);
  page->submitted(0, allReduce(10), 40, false, 8);
  const Listing l = readDirectory(dir.pages);
  ASSERT_EQ(l.pages.size(), 1u);
  const std::string good = readBytes(dir.pages + "/" + l.pages[0].name);
  page.reset();
  std::mt19937_64 rng(12345);
  int refused = 0;
  for (int i = 0; i < 400; ++i) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) bad[rng() % sizeof(PageHeader)] = static_cast<char>(rng());
    if (i % 5 == 0) bad.resize(rng() % bad.size());
    const std::string path = dir.pages + "/x.page";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
    const Listing r = readDirectory(dir.pages);
    refused += static_cast<int>(r.refused.size());
    for (const Refusal& f : r.refused) EXPECT_FALSE(f.why.empty());
  }
  EXPECT_GT(refused, 200);
}

// What `weftctl pages` prints on one node reads back on another, page for page, with what that
// node saw of each process; a damaged or cut stream is refused, never trusted, never a crash.
TEST(StatusPage, PagesCarriedBetweenHostsReadBackOrAreRefused) {
  TempDir dir;
  auto a = Page::create(dir.pages, identity(0, 2), 4);
  auto b = Page::create(dir.pages, identity(1, 2), 4);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  a->submitted(0, allReduce(10), 40, false, 8);
  std::vector<Refusal> refused;
  const std::string stream = encodePages(dir.pages, &refused);
  EXPECT_TRUE(refused.empty());
  const Listing here = readDirectory(dir.pages);
  const Listing there = decodePages(stream, "node7");
  EXPECT_TRUE(there.refused.empty()) << there.refused[0].why;
  ASSERT_EQ(there.pages.size(), here.pages.size());
  for (size_t i = 0; i < here.pages.size(); ++i) {
    EXPECT_EQ(there.pages[i].source, "node7");
    EXPECT_EQ(there.pages[i].header.rank, here.pages[i].header.rank);
    EXPECT_EQ(there.pages[i].inFlight.size(), here.pages[i].inFlight.size());
    EXPECT_TRUE(there.pages[i].alive);
    // Ages stay differences of the page's own host's clock.
    EXPECT_GE(there.pages[i].readNs, there.pages[i].header.createdNs);
  }
  // Cut anywhere, or damaged anywhere: refused in part or whole, never a crash.
  std::mt19937_64 rng(777);
  for (int i = 0; i < 300; ++i) {
    std::string bad = stream;
    if (i % 2) {
      bad.resize(rng() % bad.size());
    } else {
      for (int f = 0; f < 4; ++f) bad[rng() % bad.size()] = static_cast<char>(rng());
    }
    const Listing r = decodePages(bad, "node7");
    EXPECT_LE(r.pages.size(), here.pages.size());
    if (r.pages.size() < here.pages.size()) {
      EXPECT_FALSE(r.refused.empty());
    }
  }
  EXPECT_FALSE(decodePages("", "node7").refused.empty());
  EXPECT_FALSE(decodePages("weft-pages 1\nweft-page x.page 99999999999 0 1\n", "node7").refused.empty());
}

TEST(StatusPage, UnsafeDirectoriesAreRefused) {
  TempDir dir;
  ASSERT_EQ(mkdir(dir.pages.c_str(), 0755), 0);
  EXPECT_EQ(Page::create(dir.pages, identity(0, 1), 2), nullptr);
  EXPECT_THROW(readDirectory(dir.pages), Error);
  const std::string link = dir.root + "/link";
  ASSERT_EQ(chmod(dir.pages.c_str(), 0700), 0);
  ASSERT_EQ(symlink(dir.pages.c_str(), link.c_str()), 0);
  EXPECT_EQ(Page::create(link, identity(0, 1), 2), nullptr);
  EXPECT_THROW(readDirectory(link), Error);
  // A missing directory is no error to a reader: no communicator has made a page yet.
  EXPECT_TRUE(readDirectory(dir.root + "/none").missing);
}

}  // namespace
}  // namespace weft::status
