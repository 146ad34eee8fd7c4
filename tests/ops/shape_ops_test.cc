// Shape, ReshapeTo and Range in a graph whose dimensions are known only at run time, and their
// run-time errors naming the node (the conformance table checks their values).
#include "ops/shape_ops.h"

#include <gtest/gtest.h>

#include "ops/array_ops.h"
#include "ops/image_ops.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;

TEST(ShapeOpsTest, ReshapesByAShapeComputedAtRunTime) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, -1, 4});
  // [d0 * d1 as -1, 4] from x's own shape: flattens the leading dimensions whatever they are.
  auto shape = ops::ShapeOf(root, x);
  EXPECT_EQ(shape.shape(), Shape({3}));
  auto y = ops::ReshapeTo(root.WithOpName("y"), x,
                          ops::Const(root, std::vector<int64_t>{-1, 4}, Shape{2}));
  EXPECT_EQ(y.shape(), Shape({-1, -1}));
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  for (int64_t rows : {1, 5}) {
    std::vector<float> v(rows * 2 * 4);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    auto out = (*session)->Run({{"x", Tensor::FromVector<float>(v, Shape{rows, 2, 4})}},
                               {shape.name(), y.name()});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out->at(0).ToVector<int64_t>(), (std::vector<int64_t>{rows, 2, 4}));
    EXPECT_EQ(out->at(1).shape(), Shape({rows * 2, 4}));
    EXPECT_EQ(out->at(1).ToVector<float>(), v);
  }
}

TEST(ShapeOpsTest, BadShapesAndRangesFailTheRunNamingTheNode) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  auto to = ops::Placeholder(root.WithOpName("to"), DType::kI64, Shape{-1});
  auto y = ops::ReshapeTo(root.WithOpName("reshape"), x, to);
  auto d = ops::Placeholder(root.WithOpName("d"), DType::kI32, Shape{});
  auto r = ops::Range(root.WithOpName("range"), ops::Const(root, int32_t{0}),
                      ops::Const(root, int32_t{5}), d);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  struct Bad {
    std::vector<int64_t> to;
    const char* words;
  };
  for (const auto& [shape, words] : std::vector<Bad>{{{4, -1}, "cannot reshape [2,3] (6 elements)"},
                                                     {{-1, -1}, "more than one -1"},
                                                     {{0, 0, 0}, "copies dimension 2"},
                                                     {{-2, 3}, "negative dimension"}}) {
    auto out = (*session)->Run(
        {{"to", Tensor::FromVector<int64_t>(shape, Shape{static_cast<int64_t>(shape.size())})}},
        {y.name()});
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageHas(out.status(), {"'reshape'", words})) << out.status().ToString();
  }
  auto zero = (*session)->Run({{"d", Tensor::Scalar<int32_t>(0)}}, {r.name()});
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(zero.status(), {"'range'", "delta is 0"})) << zero.status().ToString();
  auto ok = (*session)->Run({{"d", Tensor::Scalar<int32_t>(2)}}, {r.name()});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->at(0).ToVector<int32_t>(), (std::vector<int32_t>{0, 2, 4}));
}

// Axes fed at run time: one out of range, given twice, or (squeeze) of a dimension that is not
// 1 fails the run naming the node, the axis and the shape.
TEST(ShapeOpsTest, BadAxesFailTheRunNamingTheNode) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, -1});
  auto axes = ops::Placeholder(root.WithOpName("axes"), DType::kI64, Shape{-1});
  auto squeezed =
      ops::AxesShape(root.WithOpName("squeeze_shape"), ops::ShapeOf(root, x), axes, "squeeze");
  auto unsqueezed =
      ops::AxesShape(root.WithOpName("unsqueeze_shape"), ops::ShapeOf(root, x), axes, "unsqueeze");
  auto sum = ops::ReduceSumAxes(root.WithOpName("sum"), x, axes, /*keep_dims=*/false);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  const Tensor xv = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  auto run = [&](const std::vector<int64_t>& a, const Output& out) {
    return (*session)->Run(
        {{"x", xv},
         {"axes", Tensor::FromVector<int64_t>(a, Shape{static_cast<int64_t>(a.size())})}},
        {out.name()});
  };
  auto good = run({-1}, sum);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->at(0).ToVector<float>(), (std::vector<float>{6, 15}));
  auto out_of_range = run({2}, sum);
  EXPECT_EQ(out_of_range.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(out_of_range.status(), {"node 'sum'", "axis 2 is outside [-2, 2)"}))
      << out_of_range.status().ToString();
  auto twice = run({1, -3}, unsqueezed);  // -3 of the result's rank 4 is 1
  EXPECT_TRUE(MessageHas(twice.status(), {"node 'unsqueeze_shape'", "given twice"}))
      << twice.status().ToString();
  auto not_one = run({0}, squeezed);
  EXPECT_TRUE(MessageHas(not_one.status(), {"node 'squeeze_shape'", "axis 0 of [2,3] is 2, not 1"}))
      << not_one.status().ToString();
}

// Resize's scales and sizes come at run time: a size that would make a huge tensor, or the wrong
// number of them, fails the run naming the node before anything is allocated.
TEST(ShapeOpsTest, BadResizeOperandsFailTheRunNamingTheNode) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, -1});
  auto sizes = ops::Placeholder(root.WithOpName("sizes"), DType::kI64, Shape{-1});
  auto none = ops::Const(root, Tensor(DType::kF32, Shape{0}));
  auto y = ops::Resize(root.WithOpName("resize"), x, none, none, sizes, {.mode = "linear"});
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  const Tensor xv = Tensor::FromVector<float>({1, 2, 3, 4}, Shape{2, 2});
  auto run = [&](std::vector<int64_t> s) {
    return (*session)->Run(
        {{"x", xv},
         {"sizes", Tensor::FromVector<int64_t>(s, Shape{static_cast<int64_t>(s.size())})}},
        {y.name()});
  };
  auto good = run({3, 1});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->at(0).shape(), Shape({3, 1}));
  auto huge = run({100000, 100000});
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(huge.status(), {"node 'resize'", "elements on the way"}))
      << huge.status().ToString();
  auto short_sizes = run({3});
  EXPECT_TRUE(MessageHas(short_sizes.status(), {"node 'resize'", "1 sizes for an input of rank 2"}))
      << short_sizes.status().ToString();
}

}  // namespace
}  // namespace dflow
