// Flagged lines (NCCL's "LL" idea): every aligned 8-byte word carries 4 bytes of payload and a
// 4-byte flag, written by one store, so a receiver that sees the flag also sees the payload. No
// fence on either side, which is what makes small messages fast; the price is half the bandwidth.
// It relies only on single-copy atomicity of aligned 8-byte accesses. A line pair (16 bytes, one
// vector store on a GPU) carries 8 payload bytes.
#pragma once

#include <cstdint>

#include "primitives_device.hpp"

namespace weft::dev {

constexpr uint32_t kLlPayloadBytes = 8;  // per line pair
constexpr uint32_t kLlPairBytes = 16;

// Stores 8 payload bytes under `flag` into the line pair at p (16-byte aligned, possibly a peer's).
WEFT_HOST_DEVICE void llStore(uint64_t* p, uint64_t payload, uint32_t flag) {
  const uint64_t a = (payload & 0xffffffffull) | (uint64_t{flag} << 32);
  const uint64_t b = (payload >> 32) | (uint64_t{flag} << 32);
#if defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA)
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
#else
  prim::atomicStore<prim::Order::kRelaxed>(p, a);
  prim::atomicStore<prim::Order::kRelaxed>(p + 1, b);
#endif
}

// Reads the line pair at p once, without waiting: its two halves, for llCarries.
WEFT_HOST_DEVICE void llPeek(const uint64_t* p, uint64_t* a, uint64_t* b) {
#if defined(WEFT_DEVICE_PASS) && defined(WEFT_BACKEND_CUDA)
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
#else
  *a = prim::atomicLoad<prim::Order::kRelaxed>(p);
  *b = prim::atomicLoad<prim::Order::kRelaxed>(p + 1);
#endif
}

// Whether the halves a and b of a line pair both carry `flag`; if so, *payload gets its 8 bytes.
WEFT_HOST_DEVICE bool llCarries(uint64_t a, uint64_t b, uint32_t flag, uint64_t* payload) {
  if (static_cast<uint32_t>(a >> 32) != flag || static_cast<uint32_t>(b >> 32) != flag) return false;
  *payload = (a & 0xffffffffull) | (b << 32);
  return true;
}

// Reads the line pair at p: true, with the payload, once both halves carry `flag`. *seenFlag gets
// the flag of the first half (for failure records).
WEFT_HOST_DEVICE bool llLoad(const uint64_t* p, uint32_t flag, uint64_t* payload, uint32_t* seenFlag) {
  uint64_t a, b;
  llPeek(p, &a, &b);
  *seenFlag = static_cast<uint32_t>(a >> 32);
  return llCarries(a, b, flag, payload);
}

}  // namespace weft::dev
