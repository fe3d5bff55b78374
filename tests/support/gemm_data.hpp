// Test data for the GEMM + All-to-All op: every rank's rows, splits, expert groups and weights,
// made from a seed so that any rank can rebuild any other rank's, and the float64 reference of
// what a rank must receive. Ranks have different token counts; splits are random with zeros.
#pragma once

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "weft/weft.h"

namespace weft::test {

struct GemmCase {
  uint64_t seed = 0;
  int nranks = 1;
  int64_t maxTokens = 1;  // each rank has 0..maxTokens rows (rank 0 exactly maxTokens)
  int64_t k = 8;
  int64_t h = 8;
  weft_dtype_t dtype = WEFT_BFLOAT16;
  int64_t experts = 1;

  int64_t tokens(int rank) const;
  // Rows rank `rank` sends to each rank (sum: tokens(rank)); some are 0.
  std::vector<int64_t> sendCounts(int rank) const;
  // Cumulative ends of the expert groups (size experts; empty groups included).
  std::vector<int64_t> expertOffsets(int rank) const;
  // Rows `rank` receives in all.
  int64_t received(int rank) const;
};

// One rank's inputs, in host memory (copy them to the device for the GPU suite).
struct GemmInputs {
  std::vector<uint8_t> a;  // [tokens, k]
  std::vector<uint8_t> w;  // [experts, k, h]
  std::vector<int64_t> sendCounts;
  std::vector<int64_t> expertOffsets;
};

GemmInputs gemmInputs(const GemmCase& c, int rank);

// recv ([received, h]) and recvCounts of `rank` must match the float64 products of every source's
// rows for it, in source order, within float32 accumulation and the dtype's rounding; the rows
// after them (up to `capacity`) must still hold the poison.
::testing::AssertionResult checkGemm(const void* recv, const int64_t* recvCounts, const GemmCase& c, int rank,
                                     int64_t capacity);

}  // namespace weft::test
