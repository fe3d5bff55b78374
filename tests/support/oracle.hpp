// Test data and float64 reference checks shared by the CPU and GPU suites. Inputs are fresh random
// values (from a seed the test prints), outputs are poisoned (all bits set: NaN in every dtype)
// before each run, so an element nobody wrote shows up as a failure.
#pragma once

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "weft/weft.h"

namespace weft::test {

// Every element type, for tests that loop over them.
inline constexpr weft_dtype_t kDtypes[] = {WEFT_FLOAT32, WEFT_FLOAT16, WEFT_BFLOAT16};

size_t dtypeBytes(weft_dtype_t dt);
// Relative rounding error of one rounding to dt (unit roundoff).
double roundingOf(weft_dtype_t dt);
const char* dtypeName(weft_dtype_t dt);

// A deterministic draw in [0, n) for (seed, rank, what, i): sizes, splits and indices of test data.
uint64_t testDraw(uint64_t seed, int rank, uint64_t what, uint64_t i, uint64_t n);

// Element i of rank r's input, rounded to dt, as the op sees it.
double roundedInput(weft_dtype_t dt, uint64_t seed, int rank, uint64_t i);
// Writes count elements of rank r's input (starting at element `first`) into buf.
void fillInput(void* buf, weft_dtype_t dt, uint64_t seed, int rank, uint64_t first, uint64_t count);
void poison(void* buf, size_t bytes);

// y must equal the float64 sum over every rank's input, within the dtype's rounding.
::testing::AssertionResult checkAllReduce(const void* y, weft_dtype_t dt, uint64_t seed, int nranks, uint64_t count);
// Block i of recv must equal, bit for bit, block `rank` of rank i's input.
::testing::AssertionResult checkAllToAll(const void* recv, weft_dtype_t dt, uint64_t seed, int rank, int nranks,
                                         uint64_t countPerRank);

// GEMV + AllReduce: rank r's x ([batch, k]) is its input for `seed`, its w ([n, k]) its input for
// seed + 1 (gemvWeightSeed). y ([batch, n]) must equal the float64 sum over ranks of x_r . w_r^T
// within float32 accumulation over k terms plus the dtype's rounding per rank.
uint64_t gemvWeightSeed(uint64_t seed);
::testing::AssertionResult checkGemvAllReduce(const void* y, weft_dtype_t dt, uint64_t seed, int nranks, uint64_t batch,
                                              uint64_t n, uint64_t k);

}  // namespace weft::test
