// Shape inference of the math ops, including their error cases.
#include "ops/math_ops.h"

#include <gtest/gtest.h>

#include "ops/array_ops.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;

TEST(MathOpsShapeTest, BinaryBroadcasts) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root, DType::kF32, Shape{-1, 1, 5});
  auto b = ops::Placeholder(root, DType::kF32, Shape{3, 1});
  EXPECT_EQ(ops::Add(root, a, b).shape(), Shape({-1, 3, 5}));
  EXPECT_EQ(ops::Maximum(root, b, b).shape(), Shape({3, 1}));
  ASSERT_TRUE(root.ok());
  ops::Mul(root.WithOpName("m"), a, ops::Placeholder(root, DType::kF32, Shape{4}));
  EXPECT_TRUE(MessageHas(root.status(), {"node 'm' (Mul)", "[?,1,5] and [4]"}));
}

TEST(MathOpsShapeTest, BinaryRejectsBool) {
  Scope root = Scope::NewRootScope();
  auto p = ops::Placeholder(root, DType::kBool, Shape{2});
  ops::Sub(root.WithOpName("s"), p, p);
  EXPECT_TRUE(MessageHas(root.status(), {"node 's' (Sub)", "bool"}));
}

TEST(MathOpsShapeTest, MatMul) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root, DType::kF32, Shape{-1, 784});
  auto w = ops::Placeholder(root, DType::kF32, Shape{512, 784});
  EXPECT_EQ(ops::MatMul(root, a, w, {.transpose_b = true}).shape(), Shape({-1, 512}));
  auto at = ops::Placeholder(root, DType::kF32, Shape{784, 8});
  EXPECT_EQ(ops::MatMul(root, at, ops::Placeholder(root, DType::kF32, Shape{784, 3}),
                        {.transpose_a = true})
                .shape(),
            Shape({8, 3}));
  ASSERT_TRUE(root.ok());

  Scope r2 = Scope::NewRootScope();
  ops::MatMul(r2.WithOpName("v"), ops::Placeholder(r2, DType::kF32, Shape{3}),
              ops::Placeholder(r2, DType::kF32, Shape{3, 3}));
  EXPECT_TRUE(MessageHas(r2.status(), {"node 'v' (MatMul)", "rank 2", "[3]"}));
}

TEST(MathOpsShapeTest, BiasAdd) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DType::kF32, Shape{-1, 10});
  EXPECT_EQ(ops::BiasAdd(root, x, ops::Placeholder(root, DType::kF32, Shape{10})).shape(),
            Shape({-1, 10}));
  ops::BiasAdd(root.WithOpName("ba"), x, ops::Placeholder(root, DType::kF32, Shape{9}));
  EXPECT_TRUE(MessageHas(root.status(), {"node 'ba' (BiasAdd)", "9 elements", "10"}));

  Scope r2 = Scope::NewRootScope();
  ops::BiasAdd(r2.WithOpName("bm"), ops::Placeholder(r2, DType::kF32, Shape{2, 2}),
               ops::Placeholder(r2, DType::kF32, Shape{2, 2}));
  EXPECT_TRUE(MessageHas(r2.status(), {"node 'bm'", "vector"}));
}

TEST(MathOpsShapeTest, Reductions) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DType::kF32, Shape{2, -1, 4});
  EXPECT_EQ(ops::ReduceSum(root, x).shape(), Shape({}));
  EXPECT_EQ(ops::ReduceSum(root, x, {1}).shape(), Shape({2, 4}));
  EXPECT_EQ(ops::ReduceMean(root, x, {-1, 0}, {.keep_dims = true}).shape(), Shape({1, -1, 1}));
  ASSERT_TRUE(root.ok());
  ops::ReduceSum(root.WithOpName("r"), x, {3});
  EXPECT_TRUE(MessageHas(root.status(), {"node 'r' (ReduceSum)", "axis 3 is out of range"}));

  Scope r2 = Scope::NewRootScope();
  ops::ReduceMean(r2.WithOpName("twice"), ops::Placeholder(r2, DType::kF32, Shape{2, 2}), {1, -1});
  EXPECT_TRUE(MessageHas(r2.status(), {"node 'twice'", "given twice"}));
}

TEST(MathOpsShapeTest, CostFunctions) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root, DType::kF32, Shape{8, 16});
  auto b = ops::Placeholder(root, DType::kF32, Shape{16, 4});
  auto mm = ops::MatMul(root, a, b);
  ASSERT_TRUE(root.ok());
  const Node& n = mm.node();
  std::vector<DType> in_d = {DType::kF32, DType::kF32};
  std::vector<Shape> in_s = {Shape{8, 16}, Shape{16, 4}};
  OpCost c = n.op_def()->cost_fn(CostContext{n, in_d, in_s, n.output_dtypes(), n.output_shapes()});
  EXPECT_EQ(c.flops, 2.0 * 8 * 4 * 16);
  EXPECT_EQ(c.bytes_read, (8 * 16 + 16 * 4) * 4.0);
  EXPECT_EQ(c.bytes_written, 8 * 4 * 4.0);
}

}  // namespace
}  // namespace dflow
