// Gradients(): structure (sums for tensors used several times), errors naming the op or input.
#include "graph/gradients.h"

#include <gtest/gtest.h>

#include "ops/array_ops.h"
#include "ops/logic_ops.h"
#include "ops/math_ops.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;

TEST(GradientsTest, TensorUsedTwiceGetsSummedGradient) {
  // y = x*x + 3x  =>  dy/dx = 2x + 3.
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{3});
  auto y = ops::Add(root, ops::Mul(root, x, x), ops::Mul(root, ops::Const(root, 3.0f), x));
  auto g = Gradients(root, y, {x});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->at(0).node().op(), "AddN");
  auto out = testing::RunScope(root, {{"x", Tensor::FromVector<float>({1, -2, 0.5f}, Shape{3})}},
                               {g->at(0)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ToVector<float>(), std::vector<float>({5, -1, 4}));
}

// A tensor used twice whose producer has a gradient of its own: summing the two contributions
// adds nodes while the producer is being differentiated (a dangling node reference once; ASan
// runs this test too). y = (a b)^2 summed  =>  d/da = 2 (a b) b^T.
TEST(GradientsTest, SummingBeforeAProducersGradientKeepsItIntact) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{1, 2});
  auto b = ops::Const(root, std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
  for (int i = 0; i < 64; ++i) ops::NoOp(root);  // room in the node array, so it moves later
  auto p = ops::MatMul(root, a, b);
  auto loss = ops::ReduceSum(root, ops::Mul(root, p, p));
  auto g = Gradients(root, loss, {a});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto out =
      testing::RunScope(root, {{"a", Tensor::FromVector<float>({1, -1}, Shape{1, 2})}}, {g->at(0)});
  ASSERT_EQ(out.size(), 1u);
  // a b = [1 - 3, 2 - 4] = [-2, -2]; 2 (a b) b^T = 2 [-2 - 4, -6 - 8] = [-12, -28].
  EXPECT_EQ(out[0].ToVector<float>(), std::vector<float>({-12, -28}));
}

TEST(GradientsTest, GradientWithRespectToVariable) {
  Scope root = Scope::NewRootScope();
  auto w = ops::Variable(root.WithOpName("w"), Shape{2});
  auto init = ops::Assign(root.WithOpName("init"), w,
                          ops::Const(root, std::vector<float>{2, -3}, Shape{2}));
  auto loss = ops::ReduceSum(root, ops::Square(root, w));
  auto g = Gradients(root, loss, {w});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto s = Session::Create(root);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Run({}, {}, {init.node_name()}).ok());
  auto out = (*s)->Run({}, {g->at(0).name()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->at(0).ToVector<float>(), std::vector<float>({4, -6}));
}

TEST(GradientsTest, NonDifferentiableOpOnThePathNamesIt) {
  Scope root = Scope::NewRootScope();
  auto v = ops::Variable(root.WithOpName("v"), Shape{2});
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2});
  auto assigned = ops::Assign(root.WithOpName("store"), v, x);
  auto y = ops::ReduceSum(root, assigned);
  auto g = Gradients(root, y, {x});
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(g.status(), {"node 'store'", "op Assign has no gradient"}));
  EXPECT_EQ(root.status(), g.status());
}

TEST(GradientsTest, NoPathNamesTheInput) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2});
  auto unrelated = ops::Placeholder(root.WithOpName("unrelated"), DType::kF32, Shape{2});
  auto y = ops::ReduceSum(root, ops::Square(root, x));
  auto g = Gradients(root, y, {unrelated});
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(g.status(), {"no gradient flows", "'unrelated:0'"}));
}

TEST(GradientsTest, OnlyThroughAComparisonIsNoGradient) {
  // x reaches y only through the condition of a Select: no gradient through the comparison.
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2});
  auto a = ops::Const(root, std::vector<float>{1, 2}, Shape{2});
  auto y = ops::ReduceSum(root, ops::Select(root, ops::Greater(root, x, a), a, a));
  auto g = Gradients(root, y, {x});
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(g.status(), {"no gradient flows", "'x:0'"}));
}

TEST(GradientsTest, CastFromIntegerHasNoGradient) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kI32, Shape{2});
  auto y = ops::ReduceSum(root, ops::Cast(root.WithOpName("to_float"), x, DType::kF32));
  auto g = Gradients(root, y, {x});
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(g.status(), {"node 'to_float'", "Cast", "no gradient"}));
}

}  // namespace
}  // namespace dflow
