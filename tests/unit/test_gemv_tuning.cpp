// The GEMV + AllReduce tuning table: its rows, the first match deciding, the default for shapes no
// row covers, every bad row named by origin and line, and the built-in table (conf/gemv_tuning.tsv).
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "runtime/gemv_tuning.hpp"

namespace weft {
namespace {

::testing::AssertionResult parseFailsNaming(const std::string& text, const std::string& mention) {
  try {
    GemvTuning::parse(text, "t.tsv");
  } catch (const Error& e) {
    if (std::string(e.what()).find(mention) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "error '" << e.what() << "' does not mention '" << mention << "'";
  }
  return ::testing::AssertionFailure() << "parsed: " << text;
}

TEST(GemvTuning, TheFirstMatchingRowDecides) {
  const GemvTuning t = GemvTuning::parse(
      "# comment\n"
      "4 8 * 2048 fused   # trailing comment\n"
      "\n"
      "4 * * 2048 unfused\n"
      "* 1 8192 * unfused\n"
      "2 64 * * fused_rsag\n",
      "t.tsv");
  ASSERT_EQ(t.rows().size(), 4u);
  EXPECT_EQ(t.rows()[0].line, 2);
  EXPECT_EQ(t.choose(4, 8, 8192, 2048), GemvPath::kFused);        // row 1
  EXPECT_EQ(t.choose(4, 9, 8192, 2048), GemvPath::kUnfused);      // batch past row 1: row 2
  EXPECT_EQ(t.choose(4, 8, 8192, 2049), GemvPath::kFused);        // k past rows 1-2, batch past row 3: default
  EXPECT_EQ(t.choose(2, 1, 8192, 100000), GemvPath::kUnfused);    // row 3, any ranks
  EXPECT_EQ(t.choose(2, 1, 8193, 100000), GemvPath::kFusedRsag);  // n past row 3: row 4
  EXPECT_EQ(t.choose(3, 1, 8193, 100000), GemvPath::kFused);      // no row: default
  EXPECT_EQ(t.match(3, 2, 1, 1), nullptr);
  ASSERT_NE(t.match(2, 1, 1, 1), nullptr);
  EXPECT_EQ(t.match(2, 1, 1, 1)->line, 5);
}

TEST(GemvTuning, EveryBadRowIsNamedByOriginAndLine) {
  EXPECT_TRUE(parseFailsNaming("4 8 * fused\n", "t.tsv:1: expected"));
  EXPECT_TRUE(parseFailsNaming("\n4 8 * 1 sideways\n", "t.tsv:2: path 'sideways'"));
  EXPECT_TRUE(parseFailsNaming("4 -8 * 1 fused\n", "batch_max '-8'"));
  EXPECT_TRUE(parseFailsNaming("4 0 * 1 fused\n", "batch_max '0'"));
  EXPECT_TRUE(parseFailsNaming("4 8 1x * fused\n", "n_max '1x'"));
  EXPECT_TRUE(parseFailsNaming("four 8 * * fused\n", "ranks 'four'"));
  EXPECT_TRUE(parseFailsNaming("4 8 * 99999999999999999999999 fused\n", "k_max"));
  EXPECT_THROW(GemvTuning::load("/nonexistent/tuning.tsv"), Error);
}

TEST(GemvTuning, PathNamesRoundTripAndTheSettingNamesItself) {
  for (GemvPath p : {GemvPath::kFused, GemvPath::kFusedRsag, GemvPath::kUnfused, GemvPath::kBlas}) {
    EXPECT_EQ(gemvPathSetting(gemvPathName(p)), p);
    EXPECT_EQ(GemvTuning::parse(std::string("* * * * ") + gemvPathName(p), "t").choose(2, 1, 1, 1), p);
  }
  EXPECT_EQ(gemvPathSetting("auto"), std::nullopt);
  try {
    gemvPathSetting("oneshot");
    ADD_FAILURE() << "gemv_path 'oneshot' accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemv_path: 'oneshot'"), std::string::npos) << e.what();
  }
}

TEST(GemvTuning, TheBuiltInTableParsesAndFingerprintsTellTablesApart) {
  const GemvTuning builtIn = GemvTuning::load("");
  EXPECT_NE(builtIn.origin().find("conf/gemv_tuning.tsv"), std::string::npos);
  const GemvTuning same = GemvTuning::parse("4 8 * 2048 fused\n", "a");
  EXPECT_EQ(same.fingerprint(), GemvTuning::parse("# other text\n4  8  *  2048  fused", "b").fingerprint());
  EXPECT_NE(same.fingerprint(), GemvTuning::parse("4 8 * 2048 unfused\n", "c").fingerprint());
  EXPECT_NE(same.fingerprint(), GemvTuning::parse("", "d").fingerprint());
}

}  // namespace
}  // namespace weft
