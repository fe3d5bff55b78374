// weftd's wire protocol (runtime/service/wire.hpp): frames cut from any split of the byte stream,
// headers refused before their body is waited for, bodies checked field by field.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <gtest/gtest.h>

#include "runtime/service/wire.hpp"

namespace weft::service {
namespace {

std::vector<uint8_t> helloBytes(uint32_t role) {
  Hello h{};
  h.role = role;
  h.pid = 42;
  putText(h.version, "0.1.0");
  return encode(MsgType::kHello, &h, sizeof h);
}

// Feeds `bytes` `piece` at a time, as the reader asks, collecting frames until it is bad or done.
FrameReader::Result feedAll(FrameReader& r, const std::vector<uint8_t>& bytes, size_t piece, std::vector<Frame>* frames,
                            std::string* why) {
  size_t at = 0;
  for (;;) {
    Frame f;
    const FrameReader::Result res = r.next(&f, why);
    if (res == FrameReader::Result::kBad) return res;
    if (res == FrameReader::Result::kFrame) {
      frames->push_back(std::move(f));
      continue;
    }
    if (at == bytes.size()) return res;
    const size_t n = std::min({piece, r.want(), bytes.size() - at});
    r.feed(bytes.data() + at, n, {});
    at += n;
  }
}

TEST(ServiceWire, FramesComeWholeFromAnySplit) {
  std::vector<uint8_t> stream = helloBytes(1);
  const std::vector<uint8_t> status = encode(MsgType::kStatusRequest, nullptr, 0);
  stream.insert(stream.end(), status.begin(), status.end());
  for (size_t piece : {size_t{1}, size_t{3}, size_t{16}, size_t{4096}}) {
    FrameReader r;
    std::vector<Frame> frames;
    std::string why;
    EXPECT_EQ(feedAll(r, stream, piece, &frames, &why), FrameReader::Result::kNeedMore) << why;
    ASSERT_EQ(frames.size(), 2u) << "piece " << piece;
    Hello h{};
    ASSERT_TRUE(decodeHello(frames[0], &h, &why)) << why;
    EXPECT_EQ(h.pid, 42);
    EXPECT_STREQ(h.version, "0.1.0");
    EXPECT_EQ(frames[1].type, MsgType::kStatusRequest);
    EXPECT_TRUE(frames[1].body.empty());
    EXPECT_FALSE(r.partial());
  }
}

TEST(ServiceWire, BadHeadersAreRefusedBeforeTheirBody) {
  const auto refusal = [](Header h) {
    FrameReader r;
    r.feed(reinterpret_cast<const uint8_t*>(&h), sizeof h, {});
    Frame f;
    std::string why;
    EXPECT_EQ(r.next(&f, &why), FrameReader::Result::kBad);
    EXPECT_EQ(r.want(), 0u);  // nothing more is read from such a connection
    return why;
  };
  EXPECT_NE(refusal({1, kWireVersion, 1, 40, 0}).find("bad magic"), std::string::npos);
  const uint16_t other = kWireVersion + 1;
  EXPECT_NE(refusal({kWireMagic, other, 1, 40, 0}).find("protocol version " + std::to_string(other)),
            std::string::npos);
  EXPECT_NE(refusal({kWireMagic, kWireVersion, 0, 0, 0}).find("unknown message type 0"), std::string::npos);
  EXPECT_NE(refusal({kWireMagic, kWireVersion, 1, kMaxBodyBytes + 1, 0}).find("over the limit"), std::string::npos);
  EXPECT_NE(refusal({kWireMagic, kWireVersion, 1, 39, 0}).find("expected 40"), std::string::npos);
  EXPECT_NE(refusal({kWireMagic, kWireVersion, 1, 40, 1}).find("declares 1 descriptors"), std::string::npos);
  EXPECT_NE(refusal({kWireMagic, kWireVersion, 7, sizeof(Attached), 1}).find("declares 1"), std::string::npos);
  EXPECT_NE(refusal({kWireMagic, kWireVersion, 5, sizeof(StatusHead) + 1, 0}).find("whole rows"), std::string::npos);
  // A wake has no body and no descriptors.
  EXPECT_NE(refusal({kWireMagic, kWireVersion, 12, 8, 0}).find("expected 0"), std::string::npos);
  EXPECT_NE(refusal({kWireMagic, kWireVersion, 12, 0, 1}).find("declares 1"), std::string::npos);
  EXPECT_NE(refusal({kWireMagic, kWireVersion, 13, 0, 0}).find("unknown message type 13"), std::string::npos);
}

TEST(ServiceWire, DescriptorsMustMatchTheDeclaredCount) {
  FrameReader r;
  const std::vector<uint8_t> hello = helloBytes(1);
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  r.feed(hello.data(), hello.size(), {fd});
  Frame f;
  std::string why;
  EXPECT_EQ(r.next(&f, &why), FrameReader::Result::kBad);
  EXPECT_NE(why.find("declares 0 descriptors, 1 arrived"), std::string::npos) << why;
  // The reader closes the descriptor it was given when it goes.
}

TEST(ServiceWire, BodiesAreCheckedFieldByField) {
  std::string why;
  Frame f;
  f.type = MsgType::kHello;
  const std::vector<uint8_t> unknownRole = helloBytes(7);
  f.body.assign(unknownRole.begin() + sizeof(Header), unknownRole.end());
  Hello h{};
  EXPECT_FALSE(decodeHello(f, &h, &why));
  EXPECT_NE(why.find("unknown role 7"), std::string::npos);
  // An unterminated version string.
  memset(f.body.data() + offsetof(Hello, version), 'x', sizeof h.version);
  f.body[0] = 1;
  EXPECT_FALSE(decodeHello(f, &h, &why));
  Attach a{};
  a.commId = 77;
  a.rank = 4;
  a.nranks = 4;
  a.heapBytes = 1 << 20;
  a.queueDepth = 64;
  a.workers = 2;
  a.inboxSlots = 8;
  a.tileBytes = 65536;
  a.oneShotBytes = 65536;
  a.timeoutNs = 30000000000ull;
  a.stagingBytes = 1 << 20;
  f.type = MsgType::kAttach;
  f.body.assign(reinterpret_cast<uint8_t*>(&a), reinterpret_cast<uint8_t*>(&a) + sizeof a);
  Attach out{};
  EXPECT_FALSE(decodeAttach(f, &out, &why));  // rank 4 of 4
  EXPECT_NE(why.find("rank 4 of 4"), std::string::npos);
  a.rank = 3;
  a.heapBytes = 0;
  memcpy(f.body.data(), &a, sizeof a);
  EXPECT_FALSE(decodeAttach(f, &out, &why));
  a.heapBytes = 1 << 20;
  a.tileBytes = 1000;  // not a multiple of 256
  memcpy(f.body.data(), &a, sizeof a);
  EXPECT_FALSE(decodeAttach(f, &out, &why));
  a.tileBytes = 65536;
  memcpy(f.body.data(), &a, sizeof a);
  EXPECT_TRUE(decodeAttach(f, &out, &why)) << why;
  // weftd's engine on the CPU backend needs its staging segment; the engine word is a flag.
  a.engineInWeftd = 1;
  memcpy(f.body.data(), &a, sizeof a);
  EXPECT_TRUE(decodeAttach(f, &out, &why)) << why;
  a.stagingBytes = 0;
  memcpy(f.body.data(), &a, sizeof a);
  EXPECT_FALSE(decodeAttach(f, &out, &why));
  EXPECT_NE(why.find("staging segment"), std::string::npos) << why;
  a.stagingBytes = 1 << 20;
  a.engineInWeftd = 2;
  memcpy(f.body.data(), &a, sizeof a);
  EXPECT_FALSE(decodeAttach(f, &out, &why));
  a.engineInWeftd = 0;
  // Device heaps name every rank's GPU, and nothing past the communicator's ranks.
  a.deviceHeaps = 1;
  for (int r = 0; r < 3; ++r) a.gpus[r] = packPciId("0000:1" + std::to_string(r) + ":00");
  memcpy(f.body.data(), &a, sizeof a);
  EXPECT_FALSE(decodeAttach(f, &out, &why));  // rank 3's GPU is missing
  EXPECT_NE(why.find("GPUs"), std::string::npos);
  a.gpus[3] = packPciId("0001:ff:1f");
  memcpy(f.body.data(), &a, sizeof a);
  EXPECT_TRUE(decodeAttach(f, &out, &why)) << why;
  a.gpus[4] = 1;  // past nranks
  memcpy(f.body.data(), &a, sizeof a);
  EXPECT_FALSE(decodeAttach(f, &out, &why));
  a.gpus[4] = 0;
  a.deviceHeaps = 2;
  memcpy(f.body.data(), &a, sizeof a);
  EXPECT_FALSE(decodeAttach(f, &out, &why));
  // A message of another type is not read as this one.
  Welcome w{};
  EXPECT_FALSE(decodeWelcome(f, &w, &why));
}

// An attach reply's descriptors match its ranks, and weftd's engine has at most as many workers
// as persistent_ctas may ask for (the rank cuts its ops for them).
TEST(ServiceWire, AttachRepliesAreChecked) {
  Attached a{};
  a.commId = 7;
  a.rank = 1;
  a.nranks = 2;
  a.engineInWeftd = 2;
  a.engineWorkers = 32;
  Frame f;
  f.type = MsgType::kAttached;
  f.body.assign(reinterpret_cast<uint8_t*>(&a), reinterpret_cast<uint8_t*>(&a) + sizeof a);
  f.fds = {10, 11, 12};  // the rank's heap, its queue, the peer's heap
  Attached out{};
  std::string why;
  ASSERT_TRUE(decodeAttached(f, &out, &why)) << why;
  EXPECT_EQ(out.engineWorkers, 32u);
  a.engineWorkers = kMaxEngineWorkers + 1;
  memcpy(f.body.data(), &a, sizeof a);
  EXPECT_FALSE(decodeAttached(f, &out, &why));
  a.engineWorkers = 32;
  memcpy(f.body.data(), &a, sizeof a);
  f.fds.pop_back();
  EXPECT_FALSE(decodeAttached(f, &out, &why));
}

// A map request names an allocation of some size; a reply names an address.
TEST(ServiceWire, MapRequestsAndRepliesAreChecked) {
  Frame f;
  std::string why;
  MapMemory m{};
  f.type = MsgType::kMapMemory;
  f.body.assign(reinterpret_cast<uint8_t*>(&m), reinterpret_cast<uint8_t*>(&m) + sizeof m);
  MapMemory out{};
  EXPECT_FALSE(decodeMapMemory(f, &out, &why));  // 0 bytes
  m.base = 1 << 21;
  m.bytes = uint64_t{1} << 49;
  memcpy(f.body.data(), &m, sizeof m);
  EXPECT_FALSE(decodeMapMemory(f, &out, &why));
  m.bytes = 1 << 20;
  memcpy(f.body.data(), &m, sizeof m);
  EXPECT_TRUE(decodeMapMemory(f, &out, &why)) << why;
  EXPECT_EQ(out.bytes, uint64_t{1} << 20);
  m.base = ~uint64_t{0} - 100;  // the range wraps
  memcpy(f.body.data(), &m, sizeof m);
  EXPECT_FALSE(decodeMapMemory(f, &out, &why));
  MemoryMapped r{};
  f.type = MsgType::kMemoryMapped;
  f.body.assign(reinterpret_cast<uint8_t*>(&r), reinterpret_cast<uint8_t*>(&r) + sizeof r);
  MemoryMapped got{};
  EXPECT_FALSE(decodeMemoryMapped(f, &got, &why));  // no address
  r.address = 0x7f0000000000;
  memcpy(f.body.data(), &r, sizeof r);
  EXPECT_TRUE(decodeMemoryMapped(f, &got, &why)) << why;
  EXPECT_FALSE(decodeMapMemory(f, &out, &why));  // another type
}

// A GPU's PCI location survives the wire as one word; other forms pack to 0 (no GPU).
TEST(ServiceWire, PciLocationsPackIntoOneWord) {
  EXPECT_EQ(unpackPciId(packPciId("0000:19:00")), "0000:19:00");
  EXPECT_EQ(unpackPciId(packPciId("0001:ff:1f")), "0001:ff:1f");
  EXPECT_NE(packPciId("0000:00:00"), 0u);
  EXPECT_EQ(unpackPciId(packPciId("0000:00:00")), "0000:00:00");
  EXPECT_EQ(packPciId(""), 0u);
  EXPECT_EQ(packPciId("cpu"), 0u);
  EXPECT_EQ(packPciId("0000:19:00x"), 0u);
  EXPECT_EQ(packPciId("0000:19:20"), 0u);  // PCI has 32 devices a bus
}

}  // namespace
}  // namespace weft::service
