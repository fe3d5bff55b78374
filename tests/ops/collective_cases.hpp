// One AllReduce or All-to-All on fresh random data, checked against the float64 reference: the
// cases of tests/ops/test_collectives.cpp, which the GPU-only suites (graphs, stream order) reuse.
#pragma once

#include <vector>

#include "support/multirank.hpp"
#include "support/op_rank.hpp"
#include "support/oracle.hpp"

namespace weft::test {

inline std::vector<uint8_t> hostInput(weft_dtype_t dt, uint64_t seed, int rank, uint64_t count) {
  std::vector<uint8_t> v(count * dtypeBytes(dt));
  fillInput(v.data(), dt, seed, rank, 0, count);
  return v;
}

inline void allReduceCase(OpRank& r, int rank, int n, weft_dtype_t dt, int64_t count, uint64_t seed, bool inPlace) {
  SCOPED_TRACE(::testing::Message() << "AllReduce " << dtypeName(dt) << " count " << count
                                    << (inPlace ? " in place" : "") << " seed " << seed);
  const size_t bytes = count * dtypeBytes(dt);
  upload(inPlace ? r.heap : r.input, hostInput(dt, seed, rank, count));
  if (!inPlace) poisonBytes(r.heap, bytes);
  WEFT_ASSERT_OK(weft_allreduce(r.comm, inPlace ? r.heap : r.input, r.heap, count, dt, r.stream));
  ASSERT_TRUE(finish(r));
  EXPECT_TRUE(checkAllReduce(download(r.heap, bytes).data(), dt, seed, n, count));
}

inline void allToAllCase(OpRank& r, int rank, int n, weft_dtype_t dt, int64_t count, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "All-to-All " << dtypeName(dt) << " count " << count << " seed " << seed);
  const size_t bytes = count * n * dtypeBytes(dt);
  upload(r.input, hostInput(dt, seed, rank, count * n));
  poisonBytes(r.heap, bytes);
  WEFT_ASSERT_OK(weft_alltoall(r.comm, r.input, r.heap, count, dt, r.stream));
  ASSERT_TRUE(finish(r));
  EXPECT_TRUE(checkAllToAll(download(r.heap, bytes).data(), dt, seed, rank, n, count));
}

}  // namespace weft::test
