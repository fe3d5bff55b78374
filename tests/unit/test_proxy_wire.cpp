// The host proxy's messages (transport/net/backend.hpp): rows cut into whole-row messages and
// copied into place at the receiver, every sender's messages applied in its order whatever order
// they arrive in, and malformed ones refused without touching the heap.
#include <cstring>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "transport/net/backend.hpp"

namespace weft::transport {
namespace {

struct Sent {
  WireMessage m;
  std::vector<uint8_t> payload;
};

// What a sender's back-end puts on the wire for the messages held to `peer`: numbered, payloads
// packed from `mirror`.
std::vector<Sent> wire(OrderedMessages& held, int peer, const uint8_t* mirror, uint32_t from) {
  std::vector<Sent> out;
  held.release(peer, 0, [&](const OrderedMessages::Held& h) {
    const uint64_t bytes = payloadBytes(h.kind, h.value);
    Sent s{WireMessage{h.kind, static_cast<uint32_t>(bytes), from, static_cast<uint32_t>(out.size()), h.offset,
                       h.kind == kMsgDeliver ? 0 : h.value},
           std::vector<uint8_t>(bytes)};
    packPayload(mirror, h.kind, h.offset, h.value, s.payload.data());
    out.push_back(std::move(s));
    return true;
  });
  return out;
}

TEST(ProxyWire, RowsTravelAsWholeRowsAndLandAtTheirStride) {
  // 40 rows of 3000 bytes at a stride of 5000: 21 rows fill a message, so two messages.
  const uint64_t rows = 40, rowBytes = 3000, stride = 5000, offset = 128;
  std::vector<uint8_t> mirror(offset + rows * stride), heap(mirror.size(), 0xee);
  std::iota(mirror.begin(), mirror.end(), uint8_t{1});
  OrderedMessages held(2, kMsgPayloadMax);
  held.hold(1, kMsgRows, offset, rowsValue(Rows{rows, rowBytes, stride}));
  const auto sent = wire(held, 1, mirror.data(), 0);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(rowsOf(sent[0].m.value).rows, kMsgPayloadMax / rowBytes);
  EXPECT_LE(sent[0].m.bytes, kMsgPayloadMax);
  ArrivalOrder order(2);
  for (const Sent& s : sent)
    EXPECT_EQ(order.arrive(Region{heap.data(), heap.size()}, s.m, s.payload.data(), s.payload.size()), "");
  for (uint64_t i = 0; i < heap.size(); ++i) {
    const uint64_t r = i < offset ? rows : (i - offset) / stride, inRow = (i - offset) % stride;
    const bool copied = i >= offset && r < rows && inRow < rowBytes;
    ASSERT_EQ(heap[i], copied ? mirror[i] : 0xee) << "byte " << i;
  }
}

TEST(ProxyWire, ABackEndsSmallerMessagesCutRowsAndFlaggedDataSmaller) {
  const uint64_t payloadMax = 16128;  // what the libfabric back-end uses with ofi_rxm's defaults
  std::vector<uint8_t> mirror(1 << 20, 3);
  OrderedMessages held(2, payloadMax);
  held.hold(1, kMsgRows, 0, rowsValue(Rows{20, 2048, 4096}));  // 7 rows fit: 7 + 7 + 6
  held.hold(1, kMsgDeliver, 0, 40000);                         // 16128 + 16128 + 7744
  const auto sent = wire(held, 1, mirror.data(), 0);
  ASSERT_EQ(sent.size(), 6u);
  for (const Sent& s : sent) EXPECT_LE(s.m.bytes, payloadMax);
  EXPECT_EQ(rowsOf(sent[2].m.value).rows, 6u);
  EXPECT_EQ(sent[2].m.offset, 14u * 4096);
  EXPECT_EQ(sent[5].m.bytes, 40000u - 2 * payloadMax);
  EXPECT_EQ(sent[5].m.offset, 2 * payloadMax);
}

TEST(ProxyWire, ASignalIsAppliedAfterTheDataSentBeforeItWhateverTheArrivalOrder) {
  std::vector<uint8_t> mirror(4096, 7), heap(4096, 0);
  OrderedMessages held(2, kMsgPayloadMax);
  held.hold(1, kMsgRows, 0, rowsValue(Rows{1, 1024, 1024}));
  held.hold(1, kMsgSignalStore, 2048, 5);
  held.hold(1, kMsgSignalAdd, 2048, 2);
  auto sent = wire(held, 1, mirror.data(), 0);
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
  EXPECT_NE(arrive(WireMessage{kMsgSignalStore, 0, 0, 0, 4092, 1}, 0), "");
  EXPECT_NE(arrive(WireMessage{99, 0, 0, 0, 0, 1}, 0), "");
  EXPECT_EQ(std::count(heap.begin(), heap.end(), 0), static_cast<long>(heap.size()));
  // A sender that is not in the job, and a message seen twice.
  EXPECT_NE(order.arrive(r, WireMessage{kMsgSignalStore, 0, 7, 0, 0, 1}, nullptr, 0), "");
  EXPECT_NE(order.arrive(r, WireMessage{kMsgSignalStore, 0, 1, 0, 0, 1}, nullptr, 0), "");
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
}  // namespace weft::transport
