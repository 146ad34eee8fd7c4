// Shape inference and kernels of Placeholder, Const, Identity, NoOp and Reshape.
#include "ops/array_ops.h"

#include <gtest/gtest.h>

#include "ops/register.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;

TEST(ArrayOpsTest, PlaceholderAndConstShapes) {
  Scope root = Scope::NewRootScope();
  auto p = ops::Placeholder(root, DType::kI64, Shape{-1, 4});
  EXPECT_EQ(p.dtype(), DType::kI64);
  EXPECT_EQ(p.shape(), Shape({-1, 4}));
  EXPECT_TRUE(ops::Placeholder(root, DType::kF32).shape().unknown_rank());
  auto c = ops::Const(root, std::vector<double>{1, 2}, Shape{2, 1});
  EXPECT_EQ(c.dtype(), DType::kF64);
  EXPECT_EQ(c.shape(), Shape({2, 1}));
  EXPECT_EQ(ops::Identity(root, c).shape(), Shape({2, 1}));
  ASSERT_TRUE(root.ok());
}

TEST(ArrayOpsTest, ConstDtypeMustMatchValue) {
  ops::RegisterStandardOps();
  Graph g;
  Status s = g.AddNode({.name = "k",
                        .op = "Const",
                        .attrs = {{"value", Tensor::Scalar<float>(1)}, {"dtype", DType::kI32}}})
                 .status();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(MessageHas(g.Validate(), {"node 'k' (Const)", "f32", "i32"}));
}

TEST(ArrayOpsTest, ReshapeInfersAndChecks) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, std::vector<float>(12, 1.0f), Shape{3, 4});
  EXPECT_EQ(ops::Reshape(root, x, {2, -1}).shape(), Shape({2, 6}));
  EXPECT_EQ(ops::Reshape(root, x, {12}).shape(), Shape({12}));
  auto p = ops::Placeholder(root, DType::kF32, Shape{-1, 4});
  EXPECT_EQ(ops::Reshape(root, p, {-1, 2}).shape(), Shape({-1, 2}));
  ASSERT_TRUE(root.ok());

  Scope bad = Scope::NewRootScope();
  auto y = ops::Const(bad, std::vector<float>(12, 1.0f), Shape{3, 4});
  ops::Reshape(bad.WithOpName("r5"), y, {5, -1});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(bad.status(), {"node 'r5' (Reshape)", "cannot reshape [3,4]"}));

  Scope two = Scope::NewRootScope();
  ops::Reshape(two.WithOpName("r2"), ops::Const(two, 1.0f), {-1, -1});
  EXPECT_TRUE(MessageHas(two.status(), {"node 'r2'", "more than one -1"}));
}

TEST(ArrayOpsTest, ReshapeKernelSharesBufferAndChecksAtRunTime) {
  Scope root = Scope::NewRootScope();
  auto p = ops::Placeholder(root.WithOpName("p"), DType::kF32, Shape{-1, 4});
  auto r = ops::Reshape(root.WithOpName("r"), p, {-1, 3});
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok());
  Tensor in = Tensor::FromVector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, Shape{3, 4});
  auto out = (*session)->Run({{"p", in}}, {r.name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->at(0).shape(), Shape({4, 3}));
  EXPECT_TRUE(out->at(0).SharesBufferWith(in));
  auto bad = (*session)->Run(
      {{"p", Tensor::FromVector<float>(std::vector<float>(8, 0), Shape{2, 4})}}, {r.name()});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(bad.status(), {"node 'r' (Reshape)", "cannot reshape [2,4]"}));
}

TEST(ArrayOpsTest, IdentityAndConstKernels) {
  Scope root = Scope::NewRootScope();
  auto c = ops::Const(root, std::vector<int32_t>{4, 5, 6}, Shape{3});
  auto i = ops::Identity(root, c);
  auto out = testing::RunScope(root, {}, {i});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ToVector<int32_t>(), std::vector<int32_t>({4, 5, 6}));
}

}  // namespace
}  // namespace dflow
