// The vectorised tile sum against a scalar float64 sum: every dtype, aligned and unaligned
// buffers, counts that leave a tail, in place; and the flagged-line format.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "device/coop_device.hpp"
#include "device/ll_device.hpp"
#include "device/testdata_device.hpp"
#include "device/vector_device.hpp"

namespace weft::dev {
namespace {

TEST(VectorSum, MatchesAScalarSumEverywhere) {
  const uint64_t seed = std::random_device{}();
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
    for (uint64_t count : {1ull, 7ull, 8ull, 33ull, 1000ull})
      for (int misalign : {0, 2})
        for (bool inPlace : {false, true}) {
          const uint32_t es = dtypeSize(t);
          constexpr int n = 3;
          std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(count * es + 32));
          const uint8_t* src[n];
          for (int s = 0; s < n; ++s) {
            uint8_t* p = bufs[s].data() + (s == 1 ? misalign : 0);
            for (uint64_t i = 0; i < count; ++i) storeFromFloat(p, i, t, testValue(seed, s, i));
            src[s] = p;
          }
          std::vector<uint8_t> outBuf(count * es + 32);
          uint8_t* out = inPlace ? const_cast<uint8_t*>(src[0]) : outBuf.data();
          std::vector<double> want(count);
          for (uint64_t i = 0; i < count; ++i)
            for (int s = 0; s < n; ++s) want[i] += loadAsFloat(src[s], i, t);
          sumTile(SoloCoop{}, t, out, src, n, count);
          const double eps = t == DType::kFloat32 ? 1e-6 : t == DType::kFloat16 ? 1e-3 : 8e-3;
          for (uint64_t i = 0; i < count; ++i)
            ASSERT_NEAR(loadAsFloat(out, i, t), want[i], eps * (std::fabs(want[i]) + 1))
                << "dtype " << static_cast<int>(t) << " count " << count << " misalign " << misalign << " i " << i;
        }
}

TEST(FlaggedLines, APairIsReadOnlyUnderItsFlag) {
  alignas(16) uint64_t pair[2] = {};
  uint64_t payload = 0;
  uint32_t seen = 0;
  EXPECT_FALSE(llLoad(pair, 1, &payload, &seen)) << "zeroed memory carries no epoch";
  llStore(pair, 0x0123456789abcdefull, 7);
  EXPECT_FALSE(llLoad(pair, 8, &payload, &seen));
  EXPECT_EQ(seen, 7u);
  EXPECT_TRUE(llLoad(pair, 7, &payload, &seen));
  EXPECT_EQ(payload, 0x0123456789abcdefull);
  pair[1] = (pair[1] & 0xffffffffull) | (uint64_t{5} << 32);  // the second half still from epoch 5
  EXPECT_FALSE(llLoad(pair, 7, &payload, &seen)) << "both halves must carry the flag";
}

}  // namespace
}  // namespace weft::dev
