// Subgraph fusion (rewrite/subgraph_fusion.h): GELU, LayerNorm and a Linear layer's bias as a
// model exported op by op spells them, put back as one op, and the rewritten plan computing
// what the plain one does (the run without the plan rewrites is the reference).
#include "rewrite/subgraph_fusion.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "rewrite_fixture.h"

namespace dflow {
namespace {

using testing::RandomFloats;

// PyTorch's GELU export: x * (erf(x / sqrt 2) + 1) * 0.5.
Output SpelledGelu(const Scope& s, Output x) {
  Output e = ops::Erf(s, ops::Div(s, x, ops::Const(s, std::sqrt(2.f))));
  return ops::Mul(s, ops::Mul(s, x, ops::Add(s, e, ops::Const(s, 1.f))), ops::Const(s, 0.5f));
}

// The decomposed LayerNorm of the ONNX import (onnx/composite_ops.cc) over the last axis.
struct SpelledNorm {
  Output mean, y;
};
SpelledNorm SpelledLayerNorm(const Scope& s, Output x, int64_t k) {
  Output mean = ops::ReduceMean(s, x, {-1}, {.keep_dims = true});
  Output d = ops::Sub(s, x, mean);
  Output var = ops::ReduceMean(s, ops::Square(s, d), {-1}, {.keep_dims = true});
  Output inv = ops::Rsqrt(s, ops::Add(s, var, ops::Const(s, 1e-5f)));
  Output y = ops::Mul(s, ops::Mul(s, d, inv), Const(s, {k}, 7));
  return {mean, ops::Add(s.WithOpName("y"), y, Const(s, {k}, 8))};
}

TEST(SubgraphFusionTest, GeluAsExportedBecomesOneOp) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 7});
  ops::Identity(root.WithOpName("y"), SpelledGelu(root, x));
  std::vector<float> v = RandomFloats(3 * 7, 2, -4, 4);
  v[4] = std::numeric_limits<float>::quiet_NaN();
  auto ops = ExpectSameWithFusion(root, {{"x", Tensor::FromVector(v, Shape{3, 7})}}, {"y"});
  EXPECT_EQ(ops["Gelu"], 1);
  for (const char* gone : {"Erf", "Div", "Mul", "Add"}) EXPECT_EQ(ops[gone], 0) << gone;
}

TEST(SubgraphFusionTest, AGeluWhoseInnerValueIsReadElsewhereStays) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 5});
  Output e = ops::Erf(root.WithOpName("erf"), ops::Div(root, x, ops::Const(root, std::sqrt(2.f))));
  ops::Mul(root.WithOpName("y"), ops::Mul(root, x, ops::Add(root, e, ops::Const(root, 1.f))),
           ops::Const(root, 0.5f));
  auto xv = Tensor::FromVector(RandomFloats(10, 3, -2, 2), Shape{2, 5});
  auto ops = ExpectSameWithFusion(root, {{"x", xv}}, {"y", "erf"});
  EXPECT_EQ(ops["Gelu"], 0);
  EXPECT_EQ(ops["Erf"], 1);
}

TEST(SubgraphFusionTest, LayerNormAsDecomposedBecomesOneKernel) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 4, 48});
  SpelledLayerNorm(root, x, 48);
  auto xv = Tensor::FromVector(RandomFloats(3 * 4 * 48, 5, -3, 3), Shape{3, 4, 48});
  auto ops = ExpectSameWithFusion(root, {{"x", xv}}, {"y"});
  EXPECT_EQ(ops["_LayerNorm"], 1);
  for (const char* gone : {"ReduceMean", "Sub", "Square", "Rsqrt", "Mul", "Add"}) {
    EXPECT_EQ(ops[gone], 0) << gone;
  }
  // A row with a NaN is NaN throughout, as the decomposed ops make it.
  std::vector<float> v = RandomFloats(3 * 4 * 48, 6, -3, 3);
  v[50] = std::numeric_limits<float>::quiet_NaN();
  ExpectSameWithFusion(root, {{"x", Tensor::FromVector(v, Shape{3, 4, 48})}}, {"y"});
}

TEST(SubgraphFusionTest, ALayerNormWhoseMeanIsFetchedStays) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 16});
  SpelledNorm n = SpelledLayerNorm(root, x, 16);
  ops::Identity(root.WithOpName("mean"), n.mean);
  auto xv = Tensor::FromVector(RandomFloats(32, 9, -3, 3), Shape{2, 16});
  auto ops = ExpectSameWithFusion(root, {{"x", xv}}, {"y", "mean"});
  EXPECT_EQ(ops["_LayerNorm"], 0);
}

// y = Add(Reshape(MatMul(Reshape(x, [-1, 6]), w [6, 4]), [2, 5, 4]), b): a Linear layer on
// [2, 5, 6] as PyTorch exports it; the ops of the rewritten plan.
std::map<std::string, int> LinearThroughReshape(const Shape& bias) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 5, 6});
  Output rows = ops::Reshape(root, x, {-1, 6});
  Output y = ops::Reshape(root, ops::MatMul(root, rows, Const(root, {6, 4}, 1)), {2, 5, 4});
  ops::Add(root.WithOpName("y"), y, Const(root, bias, 2));
  auto xv = Tensor::FromVector(RandomFloats(60, 3, -2, 2), Shape{2, 5, 6});
  return ExpectSameWithFusion(root, {{"x", xv}}, {"y"});
}

TEST(SubgraphFusionTest, ALinearLayersBiasMovesIntoTheMatMulBeforeItsReshape) {
  auto ops = LinearThroughReshape(Shape{4});
  EXPECT_EQ(ops["_FusedMatMul"], 1);
  EXPECT_EQ(ops["Add"], 0);
  EXPECT_EQ(ops["MatMul"], 0);
}

TEST(SubgraphFusionTest, ABiasOfAnotherShapeStaysAnAdd) {
  auto ops = LinearThroughReshape(Shape{5, 4});  // not one value per column
  EXPECT_EQ(ops["_FusedMatMul"], 0);
  EXPECT_EQ(ops["Add"], 1);
}

}  // namespace
}  // namespace dflow
