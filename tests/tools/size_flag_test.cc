// tools::ParseByteSize: the sizes --memory-limit takes, and the text it refuses.
#include "tools/size_flag.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace dflow::tools {
namespace {

TEST(SizeFlagTest, UnitsAndFractions) {
  EXPECT_EQ(ParseByteSize("1048576").value(), 1048576);
  EXPECT_EQ(ParseByteSize("512MiB").value(), 512LL << 20);
  EXPECT_EQ(ParseByteSize("72MiB").value(), 72LL << 20);
  EXPECT_EQ(ParseByteSize("72mib").value(), 72LL << 20);
  EXPECT_EQ(ParseByteSize("1GiB").value(), 1LL << 30);
  EXPECT_EQ(ParseByteSize("1.5GB").value(), 1500000000);
  EXPECT_EQ(ParseByteSize("1.5GiB").value(), 3LL << 29);
  EXPECT_EQ(ParseByteSize("2KB").value(), 2000);
  EXPECT_EQ(ParseByteSize("2kb").value(), 2000);
  EXPECT_EQ(ParseByteSize("2KiB").value(), 2048);
  EXPECT_EQ(ParseByteSize("3TB").value(), 3000000000000);
  EXPECT_EQ(ParseByteSize("1TiB").value(), 1LL << 40);
  EXPECT_EQ(ParseByteSize("100B").value(), 100);
  EXPECT_EQ(ParseByteSize("1.1KiB").value(), 1126);  // 1126.4, rounded down
  EXPECT_EQ(ParseByteSize(".5KB").value(), 500);
  EXPECT_EQ(ParseByteSize("4194304TiB").value(), 1LL << 62);
}

TEST(SizeFlagTest, BadTextIsQuotedWithTheReason) {
  struct Case {
    const char* text;
    const char* why;
  };
  for (const Case& c : std::vector<Case>{
           {"12XB", "unknown unit 'XB'"},
           {"-5MiB", "a size has no sign"},
           {"+5MiB", "a size has no sign"},
           {"0", "at least one byte"},
           {"0MiB", "at least one byte"},
           {"0.5", "at least one byte"},
           {"", "does not start with a number"},
           {"MiB", "does not start with a number"},
           {".", "does not start with a number"},
           {"1.5.2GB", "unknown unit '.2GB'"},
           {"512 MiB", "unknown unit ' MiB'"},
           {"1e9", "unknown unit 'e9'"},
           {"4194305TiB", "over 2^62 bytes"},
           {"1000000000000000000000000000000", "over 2^62 bytes"},
       }) {
    auto r = ParseByteSize(c.text);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_TRUE(testing::MessageHas(r.status(), {fmt::format("'{}' is not a size", c.text), c.why}))
        << c.text;
  }
}

}  // namespace
}  // namespace dflow::tools
