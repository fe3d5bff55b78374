// Flagged 128-byte lines (NCCL's "LL128" idea): a line is 16 words of 8 bytes, 15 of payload and
// the last one a flag. On a GPU the 8 lanes of a warp that share a line write it with one 16-byte
// store each, in one instruction (the flag in the last lane's second word), and read it back
// alike; a receiver that sees the flag sees the whole line. That holds because a warp's aligned
// 128-byte access moves as one unit between SMs and memory over NVLink (what NCCL's LL128 relies
// on); nothing promises it over PCIe, so GPUs without an active NVLink keep the 8-byte lines of
// ll_device.hpp (`oneshot_protocol = auto` asks NVML; Engine::linesSafe). On the CPU backend one
// thread owns a whole line and orders it itself: payload words relaxed, then the flag with
// release; the reader acquires the flag first.
//
// The price is 8 bytes in 128 (the 8-byte lines pay half), which is what moves the one-shot
// AllReduce's 256 KB-1 MB inputs from NVLink bandwidth-bound to latency-bound.
#pragma once

#include <cstdint>

#include "primitives_device.hpp"

namespace weft::dev {

constexpr uint32_t kLineBytes = 128;  // 16 words
constexpr uint32_t kLinePayloadWords = 15;
constexpr uint32_t kLinePayloadBytes = kLinePayloadWords * 8;
constexpr uint32_t kLineLanes = 8;  // 16 bytes each

// How a group's threads share lines: on a GPU a thread is one lane (words 2q and 2q + 1 of its
// line, q = its lane % 8) and a warp holds kWarpSize / 8 lines at a time; on the CPU the one
// thread holds every lane of one line.
#if defined(WEFT_DEVICE_PASS)
constexpr int kLanesPerThread = 1;
constexpr int kLinesPerWarp = prim::kWarpSize / kLineLanes;
#else
constexpr int kLanesPerThread = kLineLanes;
constexpr int kLinesPerWarp = 1;
#endif

// A thread's words of one line: 2 per lane it holds, lane i's at w[2i], w[2i + 1].
struct LineShare {
  uint64_t w[2 * kLanesPerThread];
};

// The lane (0-7) of its line that a thread at warp lane `lane` holds in its share's slot i
// (i < kLanesPerThread).
WEFT_HOST_DEVICE int lineLane(int i, int lane) {
#if defined(WEFT_DEVICE_PASS)
  (void)i;
  return lane % static_cast<int>(kLineLanes);
#else
  (void)lane;
  return i;
#endif
}

// Lines that carry `bytes` of payload.
WEFT_HOST_DEVICE uint64_t linesFor(uint64_t bytes) { return (bytes + kLinePayloadBytes - 1) / kLinePayloadBytes; }

// Whether lane q's second word is payload (lane 7's carries the flag).
WEFT_HOST_DEVICE bool laneHasSecondWord(int q) { return q != static_cast<int>(kLineLanes) - 1; }

// Writes this thread's share of the line at `line` (128-byte aligned, possibly a peer's) under
// `flag`. GPU: every lane of the line must call it in the same instruction (a converged warp).
WEFT_HOST_DEVICE void lineStore(uint64_t* line, const LineShare& s, int lane, uint64_t flag) {
#if defined(WEFT_DEVICE_PASS)
  const int q = lineLane(0, lane);
  const uint64_t second = laneHasSecondWord(q) ? s.w[1] : flag;
#if defined(WEFT_BACKEND_CUDA)
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(line + 2 * q), "l"(s.w[0]), "l"(second) : "memory");
#else
  using V = unsigned long long __attribute__((ext_vector_type(2)));
  *reinterpret_cast<volatile V*>(line + 2 * q) = V{s.w[0], second};
#endif
#else
  (void)lane;
  for (uint32_t w = 0; w < kLinePayloadWords; ++w) prim::atomicStore<prim::Order::kRelaxed>(line + w, s.w[w]);
  prim::atomicStore<prim::Order::kRelease>(line + kLinePayloadWords, flag);
#endif
}

// Reads this thread's share of the line at `line` once: true where its part of the line carries
// `flag` (on a GPU only lane 7 can tell; the caller asks the whole line). *seen gets the flag word
// where this thread holds it.
WEFT_HOST_DEVICE bool linePeek(const uint64_t* line, LineShare* s, int lane, uint64_t flag, uint64_t* seen) {
#if defined(WEFT_DEVICE_PASS)
  const int q = lineLane(0, lane);
  uint64_t a, b;
#if defined(WEFT_BACKEND_CUDA)
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(line + 2 * q) : "memory");
#else
  using V = unsigned long long __attribute__((ext_vector_type(2)));
  const V v = *reinterpret_cast<const volatile V*>(line + 2 * q);
  a = v.x;
  b = v.y;
#endif
  s->w[0] = a;
  s->w[1] = laneHasSecondWord(q) ? b : 0;
  if (laneHasSecondWord(q)) return true;
  *seen = b;
  return b == flag;
#else
  (void)lane;
  *seen = prim::atomicLoad<prim::Order::kAcquire>(line + kLinePayloadWords);
  if (*seen != flag) return false;
  for (uint32_t w = 0; w < kLinePayloadWords; ++w) s->w[w] = prim::atomicLoad<prim::Order::kRelaxed>(line + w);
  s->w[kLinePayloadWords] = 0;
  return true;
#endif
}

}  // namespace weft::dev
