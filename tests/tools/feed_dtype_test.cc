// tools::MatchPlaceholderDType: int64 feeds for int32 placeholders are converted when every value
// fits; any other mismatch is refused with the dtype to use.
#include "tools/feed_dtype.h"

#include <gtest/gtest.h>

#include <limits>

#include "ops/array_ops.h"
#include "test_util.h"

namespace dflow::tools {
namespace {

using testing::MessageHas;

Graph LabelsGraph() {
  Scope root = Scope::NewRootScope();
  ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1, 2});
  ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1});
  ops::Identity(root.WithOpName("id"), ops::Const(root.WithOpName("c"), 1.0f));
  Graph g = root.graph();
  EXPECT_TRUE(g.Validate().ok());
  return g;
}

TEST(FeedDTypeTest, Int64ValuesThatFitBecomeInt32) {
  Graph g = LabelsGraph();
  int64_t lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  Tensor labels = Tensor::FromVector<int64_t>({0, 9, lo, hi}, Shape{2, 2});
  for (const char* feed : {"labels", "labels:0"}) {
    auto r = MatchPlaceholderDType(g, feed, "labels.npy", labels);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->dtype(), DType::kI32);
    EXPECT_EQ(r->shape(), (Shape{2, 2}));
    EXPECT_EQ(r->ToVector<int32_t>(),
              (std::vector<int32_t>{0, 9, static_cast<int32_t>(lo), static_cast<int32_t>(hi)}));
  }
  // Matching dtypes, and names that are no placeholder, pass unchanged.
  Tensor i32 = Tensor::FromVector<int32_t>({1, 2}, Shape{1, 2});
  EXPECT_TRUE(MatchPlaceholderDType(g, "labels", "f", i32)->SharesBufferWith(i32));
  EXPECT_TRUE(MatchPlaceholderDType(g, "nosuch", "f", labels)->SharesBufferWith(labels));
  EXPECT_TRUE(MatchPlaceholderDType(g, "id", "f", labels)->SharesBufferWith(labels));
}

TEST(FeedDTypeTest, AnInt64ValueOutsideInt32IsNamedWithItsIndex) {
  Graph g = LabelsGraph();
  Tensor labels = Tensor::FromVector<int64_t>({0, 1, 2, 3, 3000000000, 5}, Shape{3, 2});
  auto r = MatchPlaceholderDType(g, "labels", "data/labels.npy", labels);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "--feed labels: data/labels.npy holds int64 values for placeholder 'labels' (i32); "
            "the value 3000000000 at index [2,0] does not fit int32");
  Tensor negative = Tensor::FromVector<int64_t>({-2147483649}, Shape{1, 1});
  EXPECT_TRUE(MessageHas(MatchPlaceholderDType(g, "labels", "l.npy", negative).status(),
                         {"the value -2147483649 at index [0,0]"}));
}

TEST(FeedDTypeTest, OtherMismatchesAreRefusedWithTheDTypeToUse) {
  Graph g = LabelsGraph();
  auto f64 = MatchPlaceholderDType(g, "x", "x.npy", Tensor::FromVector<double>({1.5}, Shape{1}));
  EXPECT_EQ(f64.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f64.status().message(),
            "--feed x: x.npy holds f64 values, placeholder 'x' is f32: save the array as float32 "
            "('<f4') (dflow-run converts int64 to int32 only)");
  auto f32 =
      MatchPlaceholderDType(g, "labels", "l.npy", Tensor::FromVector<float>({1, 2}, Shape{1, 2}));
  EXPECT_TRUE(MessageHas(f32.status(), {"--feed labels: l.npy holds f32 values",
                                        "placeholder 'labels' is i32", "int32 ('<i4')"}));
}

}  // namespace
}  // namespace dflow::tools
