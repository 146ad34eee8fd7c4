#include "ops/broadcast.h"

#include <gtest/gtest.h>

namespace dflow {
namespace {

TEST(BroadcastTest, NumPyRules) {
  EXPECT_EQ(*BroadcastShape(Shape{2, 3}, Shape{3}), Shape({2, 3}));
  EXPECT_EQ(*BroadcastShape(Shape{4, 1, 5}, Shape{3, 1}), Shape({4, 3, 5}));
  EXPECT_EQ(*BroadcastShape(Shape{}, Shape{7}), Shape({7}));
  EXPECT_EQ(*BroadcastShape(Shape{-1, 3}, Shape{5, 1}), Shape({5, 3}));
  EXPECT_EQ(*BroadcastShape(Shape{-1}, Shape{-1}), Shape({-1}));
  EXPECT_TRUE(BroadcastShape(Shape::Unknown(), Shape{2})->unknown_rank());
  auto bad = BroadcastShape(Shape{2, 3}, Shape{4});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("[2,3] and [4]"), std::string::npos);
}

TEST(BroadcastTest, Strides) {
  int64_t s[3];
  BroadcastStrides(Shape{3, 1}, Shape{4, 3, 5}, s);
  EXPECT_EQ(s[0], 0);
  EXPECT_EQ(s[1], 1);
  EXPECT_EQ(s[2], 0);
  BroadcastStrides(Shape{4, 3, 5}, Shape{4, 3, 5}, s);
  EXPECT_EQ(s[0], 15);
  EXPECT_EQ(s[1], 5);
  EXPECT_EQ(s[2], 1);
}

}  // namespace
}  // namespace dflow
