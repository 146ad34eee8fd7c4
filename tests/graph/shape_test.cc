#include "graph/shape.h"

#include <gtest/gtest.h>

#include "graph/dtype.h"

namespace dflow {
namespace {

TEST(DTypeTest, SizesNamesAndParsing) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4);
  EXPECT_EQ(DTypeSize(DType::kF64), 8);
  EXPECT_EQ(DTypeSize(DType::kF16), 2);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
  EXPECT_EQ(DTypeSize(DType::kI64), 8);
  EXPECT_EQ(DTypeSize(DType::kU8), 1);
  EXPECT_EQ(DTypeSize(DType::kBool), 1);
  for (DType d : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI32, DType::kI64,
                  DType::kU8, DType::kBool}) {
    auto parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  auto bad = ParseDType("float32");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("float32"), std::string::npos);
}

TEST(ShapeTest, ScalarKnownAndUnknown) {
  Shape scalar;
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.num_elements(), 1);
  EXPECT_EQ(scalar.ToString(), "[]");
  Shape s{2, -1, 3};
  EXPECT_FALSE(s.fully_defined());
  EXPECT_EQ(s.num_elements(), -1);
  EXPECT_EQ(s.ToString(), "[2,?,3]");
  EXPECT_EQ(Shape({4, 5}).num_elements(), 20);
  EXPECT_TRUE(Shape::Unknown().unknown_rank());
  EXPECT_EQ(Shape::Unknown().ToString(), "<unknown>");
}

TEST(ShapeTest, Compatibility) {
  EXPECT_TRUE(Shape({-1, 3}).IsCompatibleWith(Shape{7, 3}));
  EXPECT_FALSE(Shape({-1, 3}).IsCompatibleWith(Shape{7, 4}));
  EXPECT_FALSE(Shape({3}).IsCompatibleWith(Shape{3, 1}));
  EXPECT_TRUE(Shape::Unknown().IsCompatibleWith(Shape{1, 2, 3}));
}

TEST(ShapeTest, MakeRejectsBadDimsAndRank) {
  std::vector<int64_t> bad = {2, -3};
  EXPECT_EQ(Shape::Make(bad).status().code(), StatusCode::kInvalidArgument);
  std::vector<int64_t> deep(Shape::kMaxRank + 1, 1);
  auto r = Shape::Make(deep);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("maximum rank"), std::string::npos);
}

}  // namespace
}  // namespace dflow
