// The host proxy's messages (transport/net/backend.hpp): rows cut into whole-row messages and
// copied into place at the receiver (packed rows as one run), data applied as it comes and every signal only after what
// its sender sent before it, whatever order they arrive in (lanes overtake each other), and malformed ones refused
// without touching the heap.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "transport/net/backend.hpp"
#include "transport/proxy/proxy.hpp"
#include "transport/ucx/ucx_tls.hpp"

namespace weft::transport {
namespace {

struct Sent {
  WireMessage m;
  std::vector<uint8_t> payload;
};

// What a sender puts on the wire for messages to one peer: cut to payloadMax as the proxy cuts
// them, numbered in order, payloads packed from `mirror`.
class Wire {
 public:
  Wire(const uint8_t* mirror, uint32_t from, uint64_t payloadMax = kMsgPayloadMax)
      : mirror_(mirror), from_(from), payloadMax_(payloadMax) {}
  void message(uint32_t kind, uint64_t offset, uint64_t value) {
    cutMessage(kind, offset, value, payloadMax_, [&](uint32_t k, uint64_t at, uint64_t v) {
      const uint64_t bytes = payloadBytes(k, v);
      Sent s{WireMessage{k, static_cast<uint32_t>(bytes), from_, static_cast<uint32_t>(sent.size()), at,
                         k == kMsgDeliver ? 0 : v},
             std::vector<uint8_t>(bytes)};
      packPayload(mirror_, k, at, v, s.payload.data());
      sent.push_back(std::move(s));
    });
  }
  std::vector<Sent> sent;

 private:
  const uint8_t* mirror_;
  uint32_t from_;
  uint64_t payloadMax_;
};

// Row r of `at` is in `heap` at offset + r * at.stride, copied from the mirror's row r at
// `mirrorStride` (the stride itself, or rowBytes for packed rows); every other byte is 0xee.
void expectRowsLanded(const std::vector<uint8_t>& heap, const std::vector<uint8_t>& mirror, uint64_t offset,
                      const Rows& at, uint64_t mirrorStride) {
  for (uint64_t i = 0; i < heap.size(); ++i) {
    const uint64_t r = i < offset ? at.rows : (i - offset) / at.stride, inRow = (i - offset) % at.stride;
    const bool copied = i >= offset && r < at.rows && inRow < at.rowBytes;
    ASSERT_EQ(heap[i], copied ? mirror[offset + r * mirrorStride + inRow] : 0xee) << "byte " << i;
  }
}

TEST(ProxyWire, RowsTravelAsWholeRowsAndLandAtTheirStride) {
  // 40 rows of 3000 bytes at a stride of 5000: 21 rows fill a message, so two messages.
  const uint64_t rows = 40, rowBytes = 3000, stride = 5000, offset = 128;
  std::vector<uint8_t> mirror(offset + rows * stride), heap(mirror.size(), 0xee);
  std::iota(mirror.begin(), mirror.end(), uint8_t{1});
  Wire w(mirror.data(), 0);
  w.message(kMsgRows, offset, rowsValue(Rows{rows, rowBytes, stride}));
  const auto& sent = w.sent;
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(rowsOf(sent[0].m.value).rows, kMsgPayloadMax / rowBytes);
  EXPECT_LE(sent[0].m.bytes, kMsgPayloadMax);
  ArrivalOrder order(2);
  for (const Sent& s : sent)
    EXPECT_EQ(order.arrive(Region{heap.data(), heap.size()}, s.m, s.payload.data(), s.payload.size()), "");
  expectRowsLanded(heap, mirror, offset, Rows{rows, rowBytes, stride}, stride);
}

// The embedding's samples, which the device packed back to back in its mirror from the first
// one's place: one message whose payload is that run, and each row lands at its stride.
TEST(ProxyWire, PackedRowsTravelAsOneRunAndLandAtTheirStride) {
  const uint64_t rows = 12, rowBytes = 2048, stride = 4096, offset = 256;
  std::vector<uint8_t> mirror(offset + rows * stride), heap(mirror.size(), 0xee);
  std::iota(mirror.begin(), mirror.end(), uint8_t{7});
  Wire w(mirror.data(), 0);
  w.message(kMsgPacked, offset, rowsValue(Rows{rows, rowBytes, stride}));
  ASSERT_EQ(w.sent.size(), 1u);
  EXPECT_EQ(w.sent[0].m.bytes, rows * rowBytes);
  EXPECT_TRUE(std::equal(w.sent[0].payload.begin(), w.sent[0].payload.end(), mirror.begin() + offset));
  ArrivalOrder order(2);
  const Sent& s = w.sent[0];
  EXPECT_EQ(order.arrive(Region{heap.data(), heap.size()}, s.m, s.payload.data(), s.payload.size()), "");
  expectRowsLanded(heap, mirror, offset, Rows{rows, rowBytes, stride}, rowBytes);
}

TEST(ProxyWire, ABackEndsSmallerMessagesCutRowsAndFlaggedDataSmaller) {
  const uint64_t payloadMax = 16128;  // what the libfabric back-end uses with ofi_rxm's defaults
  std::vector<uint8_t> mirror(1 << 20, 3);
  Wire w(mirror.data(), 0, payloadMax);
  w.message(kMsgRows, 0, rowsValue(Rows{20, 2048, 4096}));  // 7 rows fit: 7 + 7 + 6
  w.message(kMsgDeliver, 0, 40000);                         // 16128 + 16128 + 7744
  const auto& sent = w.sent;
  ASSERT_EQ(sent.size(), 6u);
  for (const Sent& s : sent) EXPECT_LE(s.m.bytes, payloadMax);
  EXPECT_EQ(rowsOf(sent[2].m.value).rows, 6u);
  EXPECT_EQ(sent[2].m.offset, 14u * 4096);
  EXPECT_EQ(sent[5].m.bytes, 40000u - 2 * payloadMax);
  EXPECT_EQ(sent[5].m.offset, 2 * payloadMax);
}

TEST(ProxyWire, ASignalIsAppliedAfterTheDataSentBeforeItWhateverTheArrivalOrder) {
  std::vector<uint8_t> mirror(4096, 7), heap(4096, 0);
  Wire w(mirror.data(), 0);
  w.message(kMsgRows, 0, rowsValue(Rows{1, 1024, 1024}));
  w.message(kMsgSignalStore, 2048, 5);
  w.message(kMsgSignalAdd, 2048, 2);
  const auto& sent = w.sent;
  ASSERT_EQ(sent.size(), 3u);
  ArrivalOrder order(2);
  const Region r{heap.data(), heap.size()};
  uint64_t signal = 0;
  // The add, then the store arrive first: neither is applied before the data.
  EXPECT_EQ(order.arrive(r, sent[2].m, nullptr, 0), "");
  EXPECT_EQ(order.arrive(r, sent[1].m, nullptr, 0), "");
  memcpy(&signal, heap.data() + 2048, 8);
  EXPECT_EQ(signal, 0u);
  EXPECT_EQ(heap[0], 0);
  EXPECT_EQ(order.early(), 2u);
  EXPECT_EQ(order.arrive(r, sent[0].m, sent[0].payload.data(), sent[0].payload.size()), "");
  EXPECT_EQ(order.early(), 0u);
  EXPECT_EQ(heap[1023], 7);
  memcpy(&signal, heap.data() + 2048, 8);
  EXPECT_EQ(signal, 7u);  // stored 5, then 2 added: in the sender's order
}

TEST(ProxyWire, DataIsAppliedAsItComesAndASignalWaitsForEveryEarlierMessage) {
  std::vector<uint8_t> mirror(8192), heap(8192, 0);
  std::iota(mirror.begin(), mirror.end(), uint8_t{1});
  Wire w(mirror.data(), 0, 1024);
  w.message(kMsgRows, 0, rowsValue(Rows{1, 1024, 1024}));
  w.message(kMsgRows, 1024, rowsValue(Rows{1, 1024, 1024}));
  w.message(kMsgSignalStore, 4096, 9);
  w.message(kMsgRows, 2048, rowsValue(Rows{1, 1024, 1024}));
  const auto& sent = w.sent;
  ArrivalOrder order(2);
  const Region r{heap.data(), heap.size()};
  auto arrive = [&](size_t i) { return order.arrive(r, sent[i].m, sent[i].payload.data(), sent[i].payload.size()); };
  auto signal = [&] {
    uint64_t v = 0;
    memcpy(&v, heap.data() + 4096, 8);
    return v;
  };
  // The data after the signal, then the second run: both land at once; the signal waits.
  EXPECT_EQ(arrive(3), "");
  EXPECT_EQ(heap[2048], mirror[2048]);
  EXPECT_EQ(arrive(1), "");
  EXPECT_EQ(arrive(2), "");
  EXPECT_EQ(heap[1024], mirror[1024]);
  EXPECT_EQ(signal(), 0u);
  EXPECT_EQ(order.early(), 3u);
  // The first run: the signal follows it.
  EXPECT_EQ(arrive(0), "");
  EXPECT_EQ(signal(), 9u);
  EXPECT_EQ(order.early(), 0u);
  EXPECT_TRUE(std::equal(heap.begin(), heap.begin() + 3072, mirror.begin()));
}

TEST(ProxyWire, LanesDeliveringSideBySideNeverLetASignalPassItsData) {
  // Four threads hand over one sender's messages, each a lane taking every fourth, shuffled
  // within the lane: after every signal, the runs before it are in place.
  constexpr int kRuns = 2000, kLanes = 4;
  std::vector<uint8_t> mirror(kRuns * 256 + 8), heap(mirror.size(), 0);
  std::vector<uint64_t> seen;
  Wire w(mirror.data(), 1);
  for (int i = 0; i < kRuns; ++i) {
    std::fill(mirror.begin() + i * 256, mirror.begin() + (i + 1) * 256, static_cast<uint8_t>(1 + i % 250));
    w.message(kMsgRows, static_cast<uint64_t>(i) * 256, rowsValue(Rows{1, 256, 256}));
    if (i % 10 == 9) w.message(kMsgSignalStore, kRuns * 256, static_cast<uint64_t>(i + 1));
  }
  ArrivalOrder order(2);
  const Region r{heap.data(), heap.size()};
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    // The signal says how many runs have landed; each of them must read right.
    while (!done.load()) {
      uint64_t n = 0;
      __atomic_load(reinterpret_cast<uint64_t*>(heap.data() + kRuns * 256), &n, __ATOMIC_ACQUIRE);
      for (uint64_t i = 0; i < n; ++i)
        if (__atomic_load_n(heap.data() + i * 256 + 255, __ATOMIC_RELAXED) != 1 + i % 250) ++bad;
    }
  });
  std::vector<std::thread> lanes;
  std::atomic<int> errors{0};
  for (int l = 0; l < kLanes; ++l)
    lanes.emplace_back([&, l] {
      std::vector<size_t> mine;
      for (size_t i = l; i < w.sent.size(); i += kLanes) mine.push_back(i);
      std::mt19937 rng(l);
      for (size_t at = 0; at + 8 <= mine.size(); at += 8) std::shuffle(mine.begin() + at, mine.begin() + at + 8, rng);
      for (size_t i : mine)
        if (!order.arrive(r, w.sent[i].m, w.sent[i].payload.data(), w.sent[i].payload.size()).empty()) ++errors;
    });
  for (auto& t : lanes) t.join();
  done = true;
  reader.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(order.early(), 0u);
  EXPECT_TRUE(std::equal(heap.begin(), heap.begin() + kRuns * 256, mirror.begin()));
}

TEST(ProxyWire, LanesWantedFollowsTheCpusPerRankOnCopyingTransports) {
  EXPECT_EQ(lanesWanted(3, false, 2, 8), 3);   // a setting wins
  EXPECT_EQ(lanesWanted(0, false, 64, 1), 1);  // an RDMA NIC: one lane, large tiles as writes
  EXPECT_EQ(lanesWanted(0, true, 16, 2), 4);
  EXPECT_EQ(lanesWanted(0, true, 16, 4), 2);
  EXPECT_EQ(lanesWanted(0, true, 2, 2), 1);
  EXPECT_EQ(lanesWanted(0, true, 128, 1), 4);
}

TEST(ProxyWire, SendersAreOrderedEachOnItsOwn) {
  std::vector<uint8_t> heap(64, 0);
  const Region r{heap.data(), heap.size()};
  ArrivalOrder order(3);
  // Rank 2's first message is not held up by rank 1's missing one.
  EXPECT_EQ(order.arrive(r, WireMessage{kMsgSignalStore, 0, 1, 1, 0, 11}, nullptr, 0), "");
  EXPECT_EQ(order.arrive(r, WireMessage{kMsgSignalStore, 0, 2, 0, 8, 22}, nullptr, 0), "");
  uint64_t a = 0, b = 0;
  memcpy(&a, heap.data(), 8);
  memcpy(&b, heap.data() + 8, 8);
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 22u);
}

TEST(ProxyWire, MalformedMessagesAreRefusedAndTouchNothing) {
  std::vector<uint8_t> heap(4096, 0), payload(2048, 9);
  const Region r{heap.data(), heap.size()};
  ArrivalOrder order(2);
  uint32_t seq = 0;
  auto arrive = [&](WireMessage m, uint64_t bytes) {
    m.from = 1;
    m.seq = seq++;
    return order.arrive(r, m, payload.data(), bytes);
  };
  // Rows past the heap's end, a payload that is not rows x rowBytes, rows that overlap.
  EXPECT_NE(arrive(WireMessage{kMsgRows, 1024, 0, 0, 3500, rowsValue(Rows{1, 1024, 1024})}, 1024), "");
  EXPECT_NE(arrive(WireMessage{kMsgRows, 1024, 0, 0, 0, rowsValue(Rows{2, 1024, 1024})}, 1024), "");
  EXPECT_NE(arrive(WireMessage{kMsgRows, 2048, 0, 0, 0, rowsValue(Rows{2, 1024, 512})}, 2048), "");
  EXPECT_NE(arrive(WireMessage{kMsgPacked, 2048, 0, 0, 0, rowsValue(Rows{2, 1024, 512})}, 2048), "");
  EXPECT_NE(arrive(WireMessage{kMsgPacked, 2048, 0, 0, 2048, rowsValue(Rows{2, 1024, 2048})}, 2048), "");
  EXPECT_NE(arrive(WireMessage{kMsgPacked, 1024, 0, 0, 0, rowsValue(Rows{2, 1024, 2048})}, 1024), "");
  EXPECT_NE(arrive(WireMessage{kMsgSignalStore, 0, 0, 0, 4092, 1}, 0), "");
  EXPECT_NE(arrive(WireMessage{99, 0, 0, 0, 0, 1}, 0), "");
  // A signal that carries bytes, or whose header says it does; flagged data cut short in transit
  // (fewer bytes arrived than its header says: back-ends pass what arrived).
  EXPECT_NE(arrive(WireMessage{kMsgSignalStore, 0, 0, 0, 0, 1}, 8), "");
  EXPECT_NE(arrive(WireMessage{kMsgSignalAdd, 8, 0, 0, 0, 1}, 8), "");
  EXPECT_NE(arrive(WireMessage{kMsgDeliver, 64, 0, 0, 0, 0}, 56), "");
  EXPECT_EQ(std::count(heap.begin(), heap.end(), 0), static_cast<long>(heap.size()));
  // Refused messages take their places: the next one in order still goes.
  EXPECT_EQ(arrive(WireMessage{kMsgSignalStore, 0, 0, 0, 8, 5}, 0), "");
  EXPECT_EQ(heap[8], 5);
  heap[8] = 0;
  // A refused signal that arrives ahead of an earlier message: nothing of it is applied, its place
  // is kept, and the signal after it goes once the earlier message has come.
  const uint32_t late = seq++, bad = seq++, after = seq++;
  EXPECT_NE(order.arrive(r, WireMessage{kMsgSignalStore, 0, 1, bad, 16, 7}, payload.data(), 8), "");
  EXPECT_EQ(order.arrive(r, WireMessage{kMsgSignalStore, 0, 1, after, 24, 9}, nullptr, 0), "");
  EXPECT_EQ(heap[24], 0) << "a signal waits for every earlier message";
  EXPECT_EQ(order.arrive(r, WireMessage{kMsgSignalStore, 0, 1, late, 32, 3}, nullptr, 0), "");
  EXPECT_EQ(heap[16], 0);
  EXPECT_EQ(heap[24], 9);
  EXPECT_EQ(heap[32], 3);
  heap[24] = heap[32] = 0;
  // A sender that is not in the job, and a message seen twice.
  EXPECT_NE(order.arrive(r, WireMessage{kMsgSignalStore, 0, 7, 0, 0, 1}, nullptr, 0), "");
  EXPECT_NE(order.arrive(r, WireMessage{kMsgSignalStore, 0, 1, 0, 0, 1}, nullptr, 0), "");
}

// A batch as a back-end sends it: the parts' headers and payloads packed from `mirror`.
Sent batchOf(const uint8_t* mirror, uint32_t from, uint32_t seq, const std::vector<MessagePart>& parts) {
  const uint64_t bytes = batchBytes(parts);
  Sent s{WireMessage{kMsgBatch, static_cast<uint32_t>(bytes), from, seq, 0, parts.size()}, std::vector<uint8_t>(bytes)};
  packBatch(mirror, parts, s.payload.data());
  return s;
}

uint64_t wordAt(const std::vector<uint8_t>& heap, uint64_t offset) {
  uint64_t v = 0;
  memcpy(&v, heap.data() + offset, 8);
  return v;
}

TEST(ProxyWire, ABatchLandsEachPartInItsPlace) {
  std::vector<uint8_t> mirror(16384), heap(mirror.size(), 0xee);
  std::iota(mirror.begin(), mirror.end(), uint8_t{3});
  // A tile's strided rows, the next tile's flagged words, a signature store, a flag add.
  const std::vector<MessagePart> parts{{kMsgRows, 0, rowsValue(Rows{3, 500, 1000})},
                                       {kMsgDeliver, 4096, 512},
                                       {kMsgSignalStore, 8192, 41},
                                       {kMsgSignalAdd, 8200, 2}};
  const Sent b = batchOf(mirror.data(), 1, 0, parts);
  EXPECT_EQ(b.m.bytes, 4 * sizeof(WirePart) + 3 * 500 + 512);
  ArrivalOrder order(2);
  const Region r{heap.data(), heap.size()};
  EXPECT_EQ(order.arrive(r, b.m, b.payload.data(), b.payload.size()), "");
  for (uint64_t i = 0; i < 3; ++i)
    EXPECT_TRUE(std::equal(heap.begin() + i * 1000, heap.begin() + i * 1000 + 500, mirror.begin() + i * 1000));
  EXPECT_EQ(heap[500], 0xee);
  EXPECT_TRUE(std::equal(heap.begin() + 4096, heap.begin() + 4608, mirror.begin() + 4096));
  EXPECT_EQ(wordAt(heap, 8192), 41u);
  EXPECT_EQ(wordAt(heap, 8200), 0xeeeeeeeeeeeeeeeeull + 2);
  EXPECT_EQ(order.early(), 0u);
}

TEST(ProxyWire, ABatchsDataLandsAtOnceAndItsSignalsWaitForEveryEarlierMessage) {
  std::vector<uint8_t> mirror(8192), heap(mirror.size(), 0);
  std::iota(mirror.begin(), mirror.end(), uint8_t{1});
  const Region r{heap.data(), heap.size()};
  Wire w(mirror.data(), 1);
  w.message(kMsgRows, 0, rowsValue(Rows{1, 1024, 1024}));  // seq 0, held back below
  const Sent b = batchOf(mirror.data(), 1, 1,
                         {{kMsgSignalStore, 4096, 5},
                          {kMsgRows, 1024, rowsValue(Rows{1, 1024, 1024})},
                          {kMsgSignalAdd, 4096, 3},
                          {kMsgSignalStore, 4104, 8}});
  ArrivalOrder order(2);
  EXPECT_EQ(order.arrive(r, b.m, b.payload.data(), b.payload.size()), "");
  EXPECT_TRUE(std::equal(heap.begin() + 1024, heap.begin() + 2048, mirror.begin() + 1024));
  EXPECT_EQ(wordAt(heap, 4096), 0u);
  EXPECT_EQ(wordAt(heap, 4104), 0u);
  EXPECT_EQ(order.early(), 1u);
  EXPECT_EQ(order.arrive(r, w.sent[0].m, w.sent[0].payload.data(), w.sent[0].payload.size()), "");
  EXPECT_EQ(wordAt(heap, 4096), 8u);  // stored 5, then 3 added: the batch's own order
  EXPECT_EQ(wordAt(heap, 4104), 8u);
  EXPECT_EQ(order.early(), 0u);
  // A batch of signals alone that comes early is held whole, then applied in its turn.
  const Sent signals = batchOf(mirror.data(), 1, 3, {{kMsgSignalAdd, 4096, 1}, {kMsgSignalAdd, 4104, 1}});
  const Sent data = batchOf(mirror.data(), 1, 2,
                            {{kMsgRows, 2048, rowsValue(Rows{1, 8, 8})}, {kMsgRows, 3072, rowsValue(Rows{1, 8, 8})}});
  EXPECT_EQ(order.arrive(r, signals.m, signals.payload.data(), signals.payload.size()), "");
  EXPECT_EQ(wordAt(heap, 4096), 8u);
  EXPECT_EQ(order.arrive(r, data.m, data.payload.data(), data.payload.size()), "");
  EXPECT_EQ(wordAt(heap, 4096), 9u);
  EXPECT_EQ(wordAt(heap, 4104), 9u);
  EXPECT_EQ(heap[3072], mirror[3072]);
}

TEST(ProxyWire, AMalformedBatchIsRefusedAndTouchesNothing) {
  std::vector<uint8_t> mirror(4096, 5), heap(4096, 0);
  const Region r{heap.data(), heap.size()};
  const std::vector<MessagePart> good{{kMsgRows, 0, rowsValue(Rows{1, 256, 256})}, {kMsgSignalStore, 1024, 1}};
  uint32_t seq = 0;
  ArrivalOrder order(2);
  auto arrive = [&](Sent b) {
    b.m.seq = seq++;
    return order.arrive(r, b.m, b.payload.data(), b.payload.size());
  };
  // Cut short, a part longer than what is left, more parts said than sent, bytes said and sent
  // differing, a batch inside a batch, a part that writes past the heap after a good one.
  Sent cut = batchOf(mirror.data(), 1, 0, good);
  cut.payload.resize(cut.payload.size() - 1);
  cut.m.bytes = static_cast<uint32_t>(cut.payload.size());
  EXPECT_NE(arrive(cut), "");
  Sent longer = batchOf(mirror.data(), 1, 0, good);
  WirePart first{};
  memcpy(&first, longer.payload.data(), sizeof first);
  first.bytes = 4000;
  memcpy(longer.payload.data(), &first, sizeof first);
  EXPECT_NE(arrive(longer), "");
  Sent more = batchOf(mirror.data(), 1, 0, good);
  more.m.value = 3;
  EXPECT_NE(arrive(more), "");
  Sent differing = batchOf(mirror.data(), 1, 0, good);
  differing.m.bytes += 8;
  EXPECT_NE(arrive(differing), "");
  Sent nested = batchOf(mirror.data(), 1, 0, good);
  WirePart second{};
  memcpy(&second, nested.payload.data() + sizeof(WirePart) + 256, sizeof second);
  second.kind = kMsgBatch;
  memcpy(nested.payload.data() + sizeof(WirePart) + 256, &second, sizeof second);
  EXPECT_NE(arrive(nested), "");
  // A signal that says it carries bytes.
  Sent heavy = batchOf(mirror.data(), 1, 0, good);
  memcpy(&second, heavy.payload.data() + sizeof(WirePart) + 256, sizeof second);
  second.bytes = 8;
  memcpy(heavy.payload.data() + sizeof(WirePart) + 256, &second, sizeof second);
  heavy.payload.resize(heavy.payload.size() + 8);
  heavy.m.bytes += 8;
  EXPECT_NE(arrive(heavy), "");
  EXPECT_EQ(std::count(heap.begin(), heap.end(), 0), static_cast<long>(heap.size()));
  // Each part is checked as a lone message is: the bad one is refused, and the message's place
  // is taken, so that later ones still go.
  EXPECT_NE(arrive(batchOf(mirror.data(), 1, 0, {{kMsgRows, 0, rowsValue(Rows{1, 8, 8})}, {kMsgSignalStore, 4092, 1}})),
            "");
  EXPECT_EQ(arrive(batchOf(mirror.data(), 1, 0, good)), "");
  EXPECT_EQ(wordAt(heap, 1024), 1u);
  EXPECT_EQ(order.early(), 0u);
}

TEST(ProxyWire, ASenderFarOutOfOrderIsAFault) {
  std::vector<uint8_t> heap(64, 0);
  const Region r{heap.data(), heap.size()};
  ArrivalOrder order(2);
  std::string last;
  for (uint32_t seq = 1; seq <= ArrivalOrder::kEarlyMax + 1 && last.empty(); ++seq)
    last = order.arrive(r, WireMessage{kMsgSignalStore, 0, 1, seq, 0, seq}, nullptr, 0);
  EXPECT_NE(last.find("out of order"), std::string::npos) << last;
}

}  // namespace
// UCX_TLS read as UCX reads it: weft sets the tcp transport's segment sizes only where UCX may use
// tcp, since UCX warns of every UCX_TCP_* variable as unused on every rank otherwise, and takes
// the proxy's lanes for copying transports unless an RDMA transport may write.
TEST(ProxyWire, UcxTlsIsReadAsUcxReadsIt) {
  for (const char* tls :
       {static_cast<const char*>(nullptr), "", "all", "tcp", "rc,tcp", "sm,self,tcp", "^rc", "^sm,rc", "ib,all"})
    EXPECT_TRUE(ucxTlsMayUseTcp(tls)) << (tls ? tls : "(unset)");
  for (const char* tls : {"posix,self", "sm", "rc,sm,self", "^tcp", "^sm,tcp", "tcp_x", "rc_x,ud"})
    EXPECT_FALSE(ucxTlsMayUseTcp(tls)) << tls;
  // RDMA: named (the NIC writes), left to what the host has, or not among a list's transports.
  for (const char* tls : {"rc", "rc_x,sm", "sm,ud_v", "ib,all", "dc_mlx5", "mlx5", "gga"})
    EXPECT_EQ(ucxTlsRdma(tls), UcxRdma::kNamed) << tls;
  for (const char* tls : {static_cast<const char*>(nullptr), "", "all", "^tcp", "^rc,ud", "sm,all"})
    EXPECT_EQ(ucxTlsRdma(tls), UcxRdma::kIfPresent) << (tls ? tls : "(unset)");
  for (const char* tls : {"tcp", "posix,self", "sm,tcp", "rcx", "ibx"})
    EXPECT_EQ(ucxTlsRdma(tls), UcxRdma::kNone) << tls;
}

}  // namespace weft::transport
