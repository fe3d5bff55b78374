#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "device/dtype_device.hpp"

namespace weft::dev {
namespace {

TEST(DType, HalfRoundTripsEveryNonNanPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = halfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(f)))) << h;
      continue;
    }
    EXPECT_EQ(floatToHalf(f), h) << "pattern " << h << " value " << f;
  }
}

TEST(DType, HalfRoundsToNearestEvenAndSaturatesToInfinity) {
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even (1.0)
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(-1e9f), 0xfc00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -26)), 0x0000);  // below half of it
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
}

TEST(DType, Bf16RoundTripsAndRoundsToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16ToFloat(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(floatToBf16(f), h) << h;
    }
  }
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
}

TEST(DType, LoadAndStoreGoThroughFloat) {
  uint16_t h[2] = {};
  storeFromFloat(h, 1, DType::kFloat16, 2.5f);
  EXPECT_EQ(loadAsFloat(h, 1, DType::kFloat16), 2.5f);
  storeFromFloat(h, 0, DType::kBFloat16, -3.0f);
  EXPECT_EQ(loadAsFloat(h, 0, DType::kBFloat16), -3.0f);
  float f[1];
  storeFromFloat(f, 0, DType::kFloat32, 1.25f);
  EXPECT_EQ(loadAsFloat(f, 0, DType::kFloat32), 1.25f);
  EXPECT_EQ(dtypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(dtypeSize(DType::kBFloat16), 2u);
}

}  // namespace
}  // namespace weft::dev
