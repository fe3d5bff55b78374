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

// x and w of `rank` for `seed` in the backend's memory, each an allocation of its own and of its
// exact size, so that a sanitizer sees a read past either; fill() writes another seed's into the
// same places (a captured graph keeps the addresses).
struct GemvOnBackend : BackendCopies {
  GemvOnBackend(int rank, weft_dtype_t dt, GemvShape s, uint64_t seed) : dt_(dt), shape_(s) {
    x = copy(host(rank, seed, false));
    w = copy(host(rank, seed, true));
  }
  void fill(int rank, uint64_t seed) const {
    upload(x, host(rank, seed, false));
    upload(w, host(rank, seed, true));
  }
  void* x = nullptr;
  void* w = nullptr;

 private:
  std::vector<uint8_t> host(int rank, uint64_t seed, bool weights) const {
    const uint64_t count = weights ? shape_.n * shape_.k : shape_.batch * shape_.k;
    std::vector<uint8_t> v(count * dtypeBytes(dt_));
    fillInput(v.data(), dt_, weights ? gemvWeightSeed(seed) : seed, rank, 0, count);
    return v;
  }
  weft_dtype_t dt_;
  GemvShape shape_;
};

// The op on `in` into r.heap (y), on r's stream.
inline weft_result_t runGemv(OpRank& r, const GemvOnBackend& in, weft_dtype_t dt, GemvShape s) {
  return weft_gemv_allreduce(r.comm, in.x, in.w, r.heap, s.batch, s.n, s.k, dt, r.stream);
}

// y in r.heap against the float64 reference of the op on every rank's inputs for `seed`.
inline ::testing::AssertionResult receivedGemv(const OpRank& r, int nranks, weft_dtype_t dt, GemvShape s,
                                               uint64_t seed) {
  return checkGemvAllReduce(download(r.heap, s.batch * s.n * dtypeBytes(dt)).data(), dt, seed, nranks, s.batch, s.n,
                            s.k);
}

// One op on fresh inputs into a poisoned y, waited for and checked.
inline void gemvCase(OpRank& r, int rank, int nranks, weft_dtype_t dt, GemvShape s, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "GEMV + AllReduce " << dtypeName(dt) << " batch " << s.batch << " n " << s.n
                                    << " k " << s.k << " seed " << seed);
  const GemvOnBackend in(rank, dt, s, seed);
  poisonBytes(r.heap, s.batch * s.n * dtypeBytes(dt));
  WEFT_ASSERT_OK(runGemv(r, in, dt, s));
  ASSERT_TRUE(finish(r));
  EXPECT_TRUE(receivedGemv(r, nranks, dt, s, seed));
}

}  // namespace weft::test
