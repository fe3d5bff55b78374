// The device end of the host proxy: the trigger ring that workers post to and the proxy thread
// (transport/proxy/) drains. A peer reached through the proxy has no mapping in this process;
// its entry in the view's heap table is instead this rank's *mirror* of that peer's heap, so
// that every operator writes a proxy peer exactly as it writes a mapped one. What changes is
// how the bytes then travel: after the group's stores, its leader posts a trigger naming the
// mirror range, and the proxy writes that range into the peer's heap at the same offset.
//
// The ring follows MSCCL++'s FIFO: 16-byte triggers in a power-of-two ring in host memory the
// device can write; producers claim slots with an atomic add on `head`; the consumer publishes
// `tail` as it takes them; a slot is committed by its first word, whose top bit is the lap's
// parity, so the consumer never clears a slot. A full ring makes the producer wait (bounded,
// abort-checked); no trigger is ever dropped.
#pragma once

#include <cstdint>

#include "primitives_device.hpp"
#include "queue_device.hpp"

namespace weft::dev {

// Whether device code is built to post to the proxy: always on the CPU backend; on a GPU only in
// the proxied variant of each kernel (device/gpu/kernels.hpp), which a communicator with proxy
// peers launches, so that the direct kernels carry none of it (the GEMV sits at its register limit).
#if defined(WEFT_BACKEND_CPU) || defined(WEFT_PROXY_IN_DEVICE)
constexpr bool kProxyInDevice = true;
#else
constexpr bool kProxyInDevice = false;
#endif

enum class TriggerKind : uint32_t {
  kPut = 1,          // RMA write of mirror bytes [offset, offset + bytes) into the peer's heap
  kPutRows = 2,      // `rows` runs of `rowBytes` at `stride`, from offset (a tile's rows)
  kSignalStore = 3,  // after every earlier trigger's data to the peer is visible there: store
  kSignalAdd = 4,    // ... or add `value` at offset, with release order at the peer
  kDeliver = 5,      // mirror bytes [offset, offset + bytes) carried as a message and stored at
                     // the peer in 8-byte words, each whole (flagged lines: ll_device.hpp)
  kPutPacked = 6,    // `rows` runs of `rowBytes` back to back in the mirror from offset, which go
                     // to offset + i * stride at the peer: one message, at most packBytes
};

struct Trigger {
  uint64_t w0;  // [63] commit (lap parity) | [62:60] kind | [59:40] peer | [39:0] offset
  uint64_t w1;  // kPut/kDeliver: bytes; kSignal*: value; kPutRows/kPutPacked: rows:16 | rowBytes:24 | stride:24
};
static_assert(sizeof(Trigger) == 16, "a trigger is two words");

constexpr int kTriggerOffsetBits = 40;  // a heap of up to 1 TiB
constexpr int kTriggerPeerBits = 20;
constexpr uint64_t kTriggerCommit = uint64_t{1} << 63;
constexpr uint64_t kTriggerOffsetMask = (uint64_t{1} << kTriggerOffsetBits) - 1;
constexpr uint64_t kRowsMax = 0xffff, kRowBytesMax = 0xffffff, kStrideMax = 0xffffff;

WEFT_HOST_DEVICE uint64_t triggerWord0(TriggerKind kind, int peer, uint64_t offset) {
  return (uint64_t{static_cast<uint32_t>(kind)} << 60) | (static_cast<uint64_t>(peer) << kTriggerOffsetBits) |
         (offset & kTriggerOffsetMask);
}
WEFT_HOST_DEVICE TriggerKind triggerKind(uint64_t w0) { return static_cast<TriggerKind>((w0 >> 60) & 7); }
WEFT_HOST_DEVICE int triggerPeer(uint64_t w0) {
  return static_cast<int>((w0 >> kTriggerOffsetBits) & ((uint64_t{1} << kTriggerPeerBits) - 1));
}
WEFT_HOST_DEVICE uint64_t triggerOffset(uint64_t w0) { return w0 & kTriggerOffsetMask; }
// The commit bit a slot's first word carries once ticket `t` is in it: 1 on even laps, 0 on odd
// ones, so that the zeroed ring reads as empty and a slot of the last lap as not yet written.
WEFT_HOST_DEVICE uint64_t commitFor(uint64_t ticket, uint32_t depth) {
  return ((ticket / depth) & 1) ? 0 : kTriggerCommit;
}
WEFT_HOST_DEVICE uint64_t rowsWord(uint64_t rows, uint64_t rowBytes, uint64_t stride) {
  return (rows << 48) | (rowBytes << 24) | stride;
}

// Everything the device needs of the proxy. The host keeps it where the engine can read it and
// hands its address to the engine as entry `nranks` of the heap table (null: no proxy), so the
// view every kernel takes stays the same size (comm_device.hpp says why that matters).
struct ProxyView {
  Trigger* ring;            // [depth], host memory the device writes
  uint64_t* head;           // slots claimed by producers
  const uint64_t* tail;     // slots the proxy has taken (written by the host)
  uint64_t* tailSeen;       // the producers' latest look at tail (saves a host read per trigger)
  uint32_t depth;           // a power of two
  uint32_t packBytes;       // the most payload one message carries: a kPutPacked run's bound
  const uint8_t* viaProxy;  // [nranks]: 1 where the peer is reached through the proxy
};

}  // namespace weft::dev
