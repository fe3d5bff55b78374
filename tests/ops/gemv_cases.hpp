// One GEMV + AllReduce case on any backend: x and w of a rank on fresh random data, the op, and y
// against the float64 reference.
#pragma once

#include <vector>

#include "support/multirank.hpp"
#include "support/op_rank.hpp"
#include "support/oracle.hpp"

namespace weft::test {

struct GemvShape {
  int64_t batch, n, k;
};

// x and w of `rank` for `seed` into the backend's memory (x at r.input, w after it, returned); y
// in r.heap poisoned.
inline void* prepareGemv(OpRank& r, int rank, weft_dtype_t dt, GemvShape s, uint64_t seed) {
  const size_t es = dtypeBytes(dt);
  std::vector<uint8_t> x(s.batch * s.k * es), w(s.n * s.k * es);
  fillInput(x.data(), dt, seed, rank, 0, s.batch * s.k);
  fillInput(w.data(), dt, gemvWeightSeed(seed), rank, 0, s.n * s.k);
  void* wAt = static_cast<uint8_t*>(r.input) + (x.size() + 255) / 256 * 256;
  upload(r.input, x);
  upload(wAt, w);
  poisonBytes(r.heap, s.batch * s.n * es);
  return wAt;
}

// y in r.heap against the float64 reference of the op on every rank's inputs for `seed`.
inline ::testing::AssertionResult receivedGemv(const OpRank& r, int nranks, weft_dtype_t dt, GemvShape s,
                                               uint64_t seed) {
  return checkGemvAllReduce(download(r.heap, s.batch * s.n * dtypeBytes(dt)).data(), dt, seed, nranks, s.batch, s.n,
                            s.k);
}

// One op on fresh inputs, waited for and checked.
inline void gemvCase(OpRank& r, int rank, int nranks, weft_dtype_t dt, GemvShape s, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "GEMV + AllReduce " << dtypeName(dt) << " batch " << s.batch << " n " << s.n
                                    << " k " << s.k << " seed " << seed);
  void* w = prepareGemv(r, rank, dt, s, seed);
  WEFT_ASSERT_OK(weft_gemv_allreduce(r.comm, r.input, w, r.heap, s.batch, s.n, s.k, dt, r.stream));
  ASSERT_TRUE(finish(r));
  EXPECT_TRUE(receivedGemv(r, nranks, dt, s, seed));
}

}  // namespace weft::test
