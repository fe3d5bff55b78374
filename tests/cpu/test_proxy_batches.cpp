// The host proxy's batches, end to end between two proxies of this process: a burst of triggers
// (a put and the signal after it, posted as device code posts them) goes as one message, and the
// receiver never sees a signal before the data posted ahead of it, whether that data went in the
// batch, alone, or as an RMA write. (Every op through the proxy is the op suites run again with
// the proxy forced: tests/CMakeLists.txt.)
#include <sys/mman.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "device/comm_device.hpp"
#include "transport/proxy/proxy.hpp"

namespace weft::test {
namespace {

// The collective exchange of two ranks that are threads of this process.
class ThreadExchange {
 public:
  class Rank final : public transport::Exchange {
   public:
    Rank(ThreadExchange& all, int rank) : all_(all), rank_(rank) {}
    int rank() const override { return rank_; }
    int nranks() const override { return 2; }
    void allGather(const void* mine, size_t bytes, void* out) override { all_.gather(rank_, mine, bytes, out); }

   private:
    ThreadExchange& all_;
    int rank_;
  };

 private:
  // A round: both write their part, both copy the whole once both wrote, the last to copy ends it.
  void gather(int rank, const void* mine, size_t bytes, void* out) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return copied_ == 0; });
    parts_.resize(2 * bytes);
    memcpy(parts_.data() + rank * bytes, mine, bytes);
    const uint64_t round = round_;
    if (++written_ == 2) cv_.notify_all();
    cv_.wait(lock, [&] { return written_ == 2 || round_ != round; });
    memcpy(out, parts_.data(), 2 * bytes);
    if (++copied_ == 2) {
      written_ = copied_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<uint8_t> parts_;
  int written_ = 0, copied_ = 0;
  uint64_t round_ = 0;
};

struct Backend {
  const char* name;
  const char* backend;
  const char* var;
  const char* value;
};
const std::vector<Backend> kBackends = {
#if defined(WEFT_TEST_UCX)
    {"ucx_tcp", "ucx", "UCX_TLS", "tcp"},
    {"ucx_shm", "ucx", "UCX_TLS", "posix,self"},
#endif
#if defined(WEFT_TEST_OFI)
    {"ofi_tcp", "ofi", "FI_PROVIDER", "tcp"},
    {"ofi_shm", "ofi", "FI_PROVIDER", "shm"},
#endif
};

constexpr uint64_t kHeapBytes = 1 << 20;
constexpr uint64_t kDataAt = 4096, kFlagAt = 0, kAckAt = 64, kWordAt = 128;

// A rank's heap (what the peer's proxy writes into) and the view device code would post through.
struct RankSide {
  uint8_t* heap = nullptr;
  std::unique_ptr<transport::Proxy> proxy;
  uint8_t* table[3] = {};
  dev::CommView view;
  void post(const std::vector<uint64_t>& w0, const std::vector<uint64_t>& w1) {
    ASSERT_EQ(dev::postTriggers(view, dev::WaitSite{}, w0.data(), w1.data(), static_cast<uint32_t>(w0.size())),
              dev::Status::kOk);
  }
  uint64_t word(uint64_t at) const {
    return prim::atomicLoad<prim::Order::kAcquire>(reinterpret_cast<const uint64_t*>(heap + at));
  }
};

uint8_t pattern(uint64_t round, uint64_t i) { return static_cast<uint8_t>((round * 131 + i * 7) % 251 + 1); }

bool waitFor(const RankSide& r, uint64_t at, uint64_t value) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (r.word(at) < value)
    if (std::chrono::steady_clock::now() > until) return false;
  return true;
}

// postTriggers on a bare ring of 16 slots, with a reader that takes slots as the proxy does
// (in order, up to the first not committed): bursts of 1 to 3 slots, which wrap the ring and
// straddle its end, are found whole or not at all, each slot with its lap's commit bit.
TEST(ProxyRing, ABurstIsFoundWholeOrNotAtAll) {
  constexpr uint32_t kDepth = 16;
  constexpr uint64_t kBursts = 20000;
  std::vector<dev::Trigger> ring(kDepth, dev::Trigger{0, 0});
  alignas(64) uint64_t head = 0, tail = 0, tailSeen = 0;
  const uint8_t via[2] = {0, 1};
  dev::ProxyView p{ring.data(), &head, &tail, &tailSeen, kDepth, 4096, via};
  uint8_t* table[3] = {nullptr, nullptr, reinterpret_cast<uint8_t*>(&p)};
  dev::EngineControl control{};  // what a wait for room checks for abort
  dev::CommView v;
  v.nranks = 2;
  v.heap = table;
  v.control = &control;
  v.timeoutNs = 20'000'000'000ull;
  const dev::WaitSite site{0, 0, 1, dev::WaitWhat::kProxyRoom};
  std::atomic<bool> posted{false}, failed{false};
  std::string bad;  // the reader's, read once it has ended
  std::thread reader([&] {
    uint64_t taken = 0, value = 0;
    for (;;) {  // to the end, so that the poster never waits on a ring nobody takes
      const uint64_t w0 = prim::atomicLoad<prim::Order::kAcquire>(&ring[taken % kDepth].w0);
      if ((w0 & dev::kTriggerCommit) != dev::commitFor(taken, kDepth)) {
        if (posted.load() && taken == prim::atomicLoad<prim::Order::kRelaxed>(&head)) break;
        continue;
      }
      // The burst's first slot: its count is in the offset, and every one of its slots is there.
      const uint64_t n = dev::triggerOffset(w0);
      for (uint64_t i = 0; i < n; ++i) {
        const dev::Trigger& t = ring[(taken + i) % kDepth];
        const uint64_t w = prim::atomicLoad<prim::Order::kAcquire>(&t.w0);
        if ((w & dev::kTriggerCommit) != dev::commitFor(taken + i, kDepth) ||
            prim::atomicLoad<prim::Order::kRelaxed>(&t.w1) != value + i) {
          if (bad.empty())
            bad = "burst at slot " + std::to_string(taken) + ": slot " + std::to_string(i) + " of " +
                  std::to_string(n) + " not there with it";
          failed = true;
          break;
        }
      }
      value += n;
      taken += n;
      prim::atomicStore<prim::Order::kRelease>(&tail, taken);
    }
  });
  uint64_t value = 0;
  for (uint64_t b = 0; b < kBursts && !failed.load(); ++b) {
    const uint32_t n = 1 + b % 3;
    uint64_t w0[3], w1[3];
    for (uint32_t i = 0; i < n; ++i) {
      w0[i] = dev::triggerWord0(dev::TriggerKind::kSignalStore, 1, i == 0 ? n : 0);
      w1[i] = value + i;
    }
    const dev::Status st = dev::postTriggers(v, site, w0, w1, n);
    EXPECT_EQ(st, dev::Status::kOk);
    if (st != dev::Status::kOk) break;
    value += n;
  }
  posted = true;
  reader.join();
  EXPECT_EQ(bad, "");
  EXPECT_EQ(tail, value);
}

class ProxyBatches : public ::testing::TestWithParam<Backend> {};

// Rank 0 writes a run into its mirror of rank 1 and posts [put, flag] as one burst, of sizes that
// go in the batch, alone (past proxy_batch_bytes) and as an RMA write (past proxy_eager_bytes);
// rank 1 checks every byte the moment the flag says the round has come, then acknowledges, so
// that rank 0 may rewrite the mirror.
TEST_P(ProxyBatches, ABurstGoesAsOneMessageAndItsSignalNeverPassesItsData) {
#if defined(WEFT_TEST_SANITIZED)
  GTEST_SKIP() << "the proxy's traffic runs in the normal build only";
#endif
  const Backend b = GetParam();
  setenv(b.var, b.value, 1);
  const std::vector<uint64_t> sizes{8, 1000, 8192, 16384, 20000, 65536 + 24};
  constexpr uint64_t kRounds = 60;
  ThreadExchange ex;
  RankSide side[2];
  std::string errors[2];
  std::atomic<int> built{0};
  auto rank = [&](int r) {
    ThreadExchange::Rank me(ex, r);
    RankSide& s = side[r];
    s.heap =
        static_cast<uint8_t*>(mmap(nullptr, kHeapBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    transport::ProxyOptions o;
    o.backend = b.backend;
    o.lanes = 1;   // large runs as RMA writes, small ones in messages
    o.depth = 16;  // bursts of 2 and 3 slots wrap around the ring and straddle its end
    try {
      s.proxy = std::make_unique<transport::Proxy>(me, std::vector<uint8_t>{r == 1, r == 0},
                                                   transport::Region{s.heap, kHeapBytes}, o);
    } catch (const std::exception& e) {
      errors[r] = e.what();
      built++;
      return;
    }
    s.table[r] = s.heap;
    s.table[1 - r] = s.proxy->mirror(1 - r);
    s.table[2] = reinterpret_cast<uint8_t*>(s.proxy->view());
    s.view.rank = r;
    s.view.nranks = 2;
    s.view.heap = s.table;
    s.view.timeoutNs = 20'000'000'000ull;
    built++;
    const int peer = 1 - r;
    for (uint64_t round = 0; round < kRounds; ++round) {
      const uint64_t bytes = sizes[round % sizes.size()];
      if (r == 0) {
        if (round > 0 && !waitFor(s, kAckAt, round)) {
          errors[r] = "no ack of round " + std::to_string(round - 1);
          return;
        }
        uint8_t* run = s.table[peer] + kDataAt;
        for (uint64_t i = 0; i < bytes; ++i) run[i] = pattern(round, i);
        // Odd rounds also store a word between the data and the flag (as the signature word goes).
        std::vector<uint64_t> w0{dev::triggerWord0(dev::TriggerKind::kPut, peer, kDataAt)}, w1{bytes};
        if (round % 2) {
          w0.push_back(dev::triggerWord0(dev::TriggerKind::kSignalStore, peer, kWordAt));
          w1.push_back(round + 1);
        }
        w0.push_back(dev::triggerWord0(dev::TriggerKind::kSignalStore, peer, kFlagAt));
        w1.push_back(round + 1);
        s.post(w0, w1);
      } else {
        if (!waitFor(s, kFlagAt, round + 1)) {
          errors[r] = "no flag of round " + std::to_string(round);
          return;
        }
        if (round % 2 && s.word(kWordAt) != round + 1) {
          errors[r] = "round " + std::to_string(round) + ": the word posted before the flag was not there";
          return;
        }
        for (uint64_t i = 0; i < bytes; ++i)
          if (s.heap[kDataAt + i] != pattern(round, i)) {
            errors[r] = "round " + std::to_string(round) + " (" + std::to_string(bytes) + " bytes): byte " +
                        std::to_string(i) + " not yet there when its flag was";
            return;
          }
        s.post({dev::triggerWord0(dev::TriggerKind::kSignalStore, peer, kAckAt)}, {round + 1});
      }
    }
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  if (side[0].proxy && errors[0].empty() && !waitFor(side[0], kAckAt, kRounds)) errors[0] = "no ack of the last round";
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  if (side[0].proxy) {
    const auto t = side[0].proxy->traffic();
    // Each burst under proxy_batch_bytes is one batch; the 20000-byte and larger runs go alone
    // (the larger as a write here), so at least those rounds' flags go without company.
    EXPECT_GE(t.batches, kRounds / 2) << t.parts << " heap messages in " << t.messages;
    EXPECT_GT(t.writes, 0u);
    EXPECT_EQ(side[0].proxy->fault(), std::nullopt);
  }
  // Both threads stop (each saying goodbye) while both endpoints are open: libfabric's shm
  // provider maps a peer's region once per process, so a peer destroyed first would take it away
  // from under the other's last sends, which separate processes never share.
  for (auto& s : side)
    if (s.proxy) s.proxy->closing();
  for (auto& s : side) {
    if (s.proxy) {
      EXPECT_TRUE(s.proxy->stop(true));
    }
  }
  for (auto& s : side) s.proxy.reset();
  for (auto& s : side)
    if (s.heap) munmap(s.heap, kHeapBytes);
  unsetenv(b.var);
}

INSTANTIATE_TEST_SUITE_P(Backends, ProxyBatches, ::testing::ValuesIn(kBackends),
                         [](const ::testing::TestParamInfo<Backend>& i) { return std::string(i.param.name); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ProxyBatches);

}  // namespace
}  // namespace weft::test
