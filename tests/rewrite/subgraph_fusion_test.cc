// Subgraph fusion (rewrite/subgraph_fusion.h): GELU, LayerNorm and a Linear layer's bias as a
// model exported op by op spells them, put back as one op, and the rewritten plan computing
// what the plain one does (the run without the plan rewrites is the reference).
#include "rewrite/subgraph_fusion.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/unary_ops.h"
#include "rewrite_fixture.h"
#include "status_matchers.h"

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

// A feed-forward layer as PyTorch exports it: Linear, then the spelled-out GELU. The GELU becomes
// the _FusedMatMul's post-op; NaN and infinities (an inf product makes inf, a -inf one NaN, as
// Gelu gives them) land where the plain plan puts them.
TEST(SubgraphFusionTest, AGeluAfterALinearLayerBecomesItsPostOp) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 5, 6});
  Output rows = ops::Reshape(root, x, {-1, 6});
  Output y = ops::Reshape(root, ops::MatMul(root, rows, Const(root, {6, 4}, 1)), {2, 5, 4});
  Output h = ops::Add(root, y, Const(root, {4}, 2));
  ops::Identity(root.WithOpName("y"), SpelledGelu(root, h));
  for (int bad = 0; bad < 4; ++bad) {
    std::vector<float> v = RandomFloats(60, 3, -3, 3);
    const float special[] = {0.f, std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity()};
    if (bad > 0) v[13] = special[bad];
    auto ops = ExpectSameWithFusion(root, {{"x", Tensor::FromVector(v, Shape{2, 5, 6})}}, {"y"});
    EXPECT_EQ(ops["_FusedMatMul"], 1);
    for (const char* gone : {"Gelu", "Erf", "Div", "Mul", "Add", "MatMul"}) {
      EXPECT_EQ(ops[gone], 0) << gone;
    }
  }
  Graph g = Validated(root);
  auto fused = ops::FuseSubgraphs(g, {*g.FindNode("x"), *g.FindNode("y")});
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  EXPECT_EQ(fused->stats.gelu, 1);
  EXPECT_EQ(fused->stats.matmul_gelu, 1);
  EXPECT_EQ(fused->stats.matmul_bias, 1);
}

// When the product before the GELU is fetched too, the GELU stays an op of its own.
TEST(SubgraphFusionTest, AGeluAfterAFetchedLinearLayerStaysAnOp) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 5, 6});
  Output rows = ops::Reshape(root, x, {-1, 6});
  Output y = ops::Reshape(root, ops::MatMul(root, rows, Const(root, {6, 4}, 1)), {2, 5, 4});
  Output h = ops::Add(root.WithOpName("h"), y, Const(root, {4}, 2));
  ops::Identity(root.WithOpName("y"), SpelledGelu(root, h));
  auto xv = Tensor::FromVector(RandomFloats(60, 4, -2, 2), Shape{2, 5, 6});
  auto ops = ExpectSameWithFusion(root, {{"x", xv}}, {"y", "h"});
  EXPECT_EQ(ops["Gelu"], 1);
  EXPECT_EQ(ops["_FusedMatMul"], 1);
}

// Self-attention as PyTorch exports it, on q [B, S, H, D] and k, v [B, Sk, H, D]: queries and
// values transposed to [B, H, S, D], keys to [B, H, D, Sk], the scores divided by sqrt(D) (or
// times 1 / sqrt(D), either way round), plus a mask, softmax ("p"), then the values ("y").
Output SpelledAttention(const Scope& s, Output q, Output k, Output v, Output mask, bool mul) {
  Output qt = ops::Transpose(s, q, {0, 2, 1, 3});
  Output kt = ops::Transpose(s, k, {0, 2, 3, 1});
  Output vt = ops::Transpose(s, v, {0, 2, 1, 3});
  Output scores = ops::BatchMatMul(s, qt, kt);
  Output scaled =
      mul ? ops::Mul(s, ops::Const(s, 0.5f), scores) : ops::Div(s, scores, ops::Const(s, 2.f));
  Output p = ops::Softmax(s.WithOpName("p"), ops::Add(s, mask, scaled));
  return ops::Transpose(s.WithOpName("y"), ops::BatchMatMul(s, p, vt), {0, 2, 1, 3});
}

// Feeds for SpelledAttention on [2, 5, 3, 4] with a mask [2, 1, 1, 5] that pads the first
// sequence after 3 tokens; `bad` 1 puts a NaN in the queries, 2 also -infinity in the mask.
Session::Feeds AttentionFeeds(int bad) {
  const Shape x{2, 5, 3, 4};
  std::vector<float> qv = RandomFloats(120, 1, -2, 2), mv(10, 0.f);
  mv[3] = mv[4] = -10000.f;
  if (bad >= 1) qv[7] = std::numeric_limits<float>::quiet_NaN();
  if (bad >= 2) mv[6] = -std::numeric_limits<float>::infinity();
  return {{"q", Tensor::FromVector(qv, x)},
          {"k", Tensor::FromVector(RandomFloats(120, 2, -2, 2), x)},
          {"v", Tensor::FromVector(RandomFloats(120, 3, -2, 2), x)},
          {"mask", Tensor::FromVector(mv, Shape{2, 1, 1, 5})}};
}

Scope AttentionScope(bool mul, const Shape& x = Shape{2, 5, 3, 4}) {
  Scope root = Scope::NewRootScope();
  auto q = ops::Placeholder(root.WithOpName("q"), DType::kF32, x);
  auto k = ops::Placeholder(root.WithOpName("k"), DType::kF32, x);
  auto v = ops::Placeholder(root.WithOpName("v"), DType::kF32, x);
  auto mask = ops::Placeholder(root.WithOpName("mask"), DType::kF32, Shape{x[0], 1, 1, x[1]});
  SpelledAttention(root, q, k, v, mask, mul);
  return root;
}

// The whole attention becomes one _Attention that reads the heads where they lie (no
// Transpose left), also when the batch and the sequence are unknown until run time; NaN and
// infinities in the queries and the mask land where the plain plan puts them.
TEST(SubgraphFusionTest, AttentionBecomesOneOp) {
  for (bool mul : {false, true}) {
    for (const Shape& x : {Shape{2, 5, 3, 4}, Shape{-1, -1, 3, 4}}) {
      Scope root = AttentionScope(mul, x);
      for (int bad = 0; bad < 3; ++bad) {
        auto ops = ExpectSameWithFusion(root, AttentionFeeds(bad), {"y"}, 1e-5);
        EXPECT_EQ(ops["_Attention"], 1);
        for (const char* gone :
             {"Transpose", "BatchMatMul", "_ScaledBatchMatMul", "Softmax", "Div", "Mul", "Add"}) {
          EXPECT_EQ(ops[gone], 0) << gone;
        }
      }
      Graph g = Validated(root);
      auto fused = ops::FuseSubgraphs(g, {*g.FindNode("y")});
      ASSERT_TRUE(fused.ok()) << fused.status().ToString();
      EXPECT_EQ(fused->stats.scaled_matmuls, 1);
      EXPECT_EQ(fused->stats.attention, 1);
      const Node& y = fused->graph.node(*fused->graph.FindNode("y"));
      ASSERT_EQ(y.op(), "_Attention");
      EXPECT_EQ(std::get<double>(*y.FindAttr("alpha")), 0.5);
      EXPECT_EQ(std::get<int64_t>(*y.FindAttr("heads")), 3);
      EXPECT_EQ(std::get<int64_t>(*y.FindAttr("head_dim")), 4);
      EXPECT_EQ(y.inputs()[0].node, *fused->graph.FindNode("q"));
    }
  }
}

// With the probabilities fetched too, the scores, their scale and the mask become one
// _ScaledBatchMatMul that reads the keys transposed (their Transpose keeps the last axis), and
// the rest stays.
TEST(SubgraphFusionTest, AttentionWithItsProbabilitiesFetchedFusesTheScores) {
  for (bool mul : {false, true}) {
    Scope root = AttentionScope(mul);
    for (int bad = 0; bad < 3; ++bad) {
      auto ops = ExpectSameWithFusion(root, AttentionFeeds(bad), {"y", "p"}, 1e-5);
      EXPECT_EQ(ops["_ScaledBatchMatMul"], 1);
      EXPECT_EQ(ops["_Attention"], 0);
      EXPECT_EQ(ops["BatchMatMul"], 1);  // the values' product
      EXPECT_EQ(ops["Transpose"], 4);
      for (const char* gone : {"Div", "Mul", "Add"}) EXPECT_EQ(ops[gone], 0) << gone;
    }
    Graph g = Validated(root);
    auto fused = ops::FuseSubgraphs(g, {*g.FindNode("y"), *g.FindNode("p")});
    ASSERT_TRUE(fused.ok()) << fused.status().ToString();
    EXPECT_EQ(fused->stats.scaled_matmuls, 1);
    EXPECT_EQ(fused->stats.transposed_operands, 1);
    EXPECT_EQ(fused->stats.attention, 0);
    for (int i = 0; i < fused->graph.num_nodes(); ++i) {
      const Node& n = fused->graph.node(i);
      if (n.op() == "Transpose") {
        EXPECT_EQ(std::get<std::vector<int64_t>>(*n.FindAttr("perm")),
                  std::vector<int64_t>({0, 2, 1, 3}));
      }
      if (n.op() == "_ScaledBatchMatMul") {
        EXPECT_EQ(std::get<double>(*n.FindAttr("alpha")), 0.5);
        EXPECT_TRUE(std::get<bool>(*n.FindAttr("transpose_b")));
      }
    }
  }
}

// Queries, keys and values sliced from one projection [B, S, 3 * H * D] and reshaped to heads
// (PyTorch's split of a fused in-projection): _Attention reads them from the projection at three
// offsets, so neither the Slices nor the Reshapes run. With a batch unknown until run time the
// Reshapes could move rows between sequences, so each head keeps its slice.
TEST(SubgraphFusionTest, AttentionReadsSlicedHeadsFromTheirProjection) {
  for (int64_t batch : {2, -1}) {
    Scope root = Scope::NewRootScope();
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{batch, 5, 36});
    auto mask = ops::Placeholder(root.WithOpName("mask"), DType::kF32, Shape{batch, 1, 1, 5});
    std::vector<Output> heads;
    for (int64_t i = 0; i < 3; ++i) {
      Output part = ops::Slice(root, x, {0, 0, 12 * i}, {-1, -1, 12});
      heads.push_back(ops::Reshape(root, part, {batch < 0 ? -1 : 2, 5, 3, 4}));
    }
    SpelledAttention(root, heads[0], heads[1], heads[2], mask, false);
    std::vector<float> xv = RandomFloats(2 * 5 * 36, 11, -2, 2);
    xv[40] = std::numeric_limits<float>::infinity();  // a key of the first sequence
    Session::Feeds feeds = {{"x", Tensor::FromVector(xv, Shape{2, 5, 36})},
                            {"mask", AttentionFeeds(0).back().second}};
    auto ops = ExpectSameWithFusion(root, feeds, {"y"}, 1e-5);
    EXPECT_EQ(ops["_Attention"], 1) << batch;
    EXPECT_EQ(ops["Transpose"], 0);
    EXPECT_EQ(ops["Slice"], batch < 0 ? 3 : 0);
    Graph g = Validated(root);
    auto fused = ops::FuseSubgraphs(g, {*g.FindNode("y")});
    ASSERT_TRUE(fused.ok()) << fused.status().ToString();
    const Node& y = fused->graph.node(*fused->graph.FindNode("y"));
    ASSERT_EQ(y.op(), "_Attention");
    if (batch > 0) {
      for (int i = 0; i < 3; ++i) EXPECT_EQ(y.inputs()[i].node, *fused->graph.FindNode("x"));
      EXPECT_EQ(std::get<int64_t>(*y.FindAttr("k_col")), 12);
      EXPECT_EQ(std::get<int64_t>(*y.FindAttr("v_col")), 24);
    }
  }
}

// A head sliced and reshaped where another device was asked for stays as it is: the attention
// reads the Reshape's output, and the Slice of that head alone remains.
TEST(SubgraphFusionTest, AttentionKeepsAHeadSlicedOnAnotherRequestedDevice) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 5, 36});
  auto mask = ops::Placeholder(root.WithOpName("mask"), DType::kF32, Shape{2, 1, 1, 5});
  std::vector<Output> heads;
  for (int64_t i = 0; i < 3; ++i) {
    const Scope at = i == 0 ? root.WithDevice("cpu:1") : root;
    Output part = ops::Slice(at, x, {0, 0, 12 * i}, {-1, -1, 12});
    heads.push_back(ops::Reshape(at.WithOpName("head" + std::to_string(i)), part, {2, 5, 3, 4}));
  }
  SpelledAttention(root, heads[0], heads[1], heads[2], mask, false);
  Graph g = Validated(root);
  auto fused = ops::FuseSubgraphs(g, {*g.FindNode("y")});
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  const Graph& f = fused->graph;
  const Node& y = f.node(*f.FindNode("y"));
  ASSERT_EQ(y.op(), "_Attention");
  EXPECT_EQ(y.inputs()[0].node, *f.FindNode("head0"));
  EXPECT_EQ(std::get<int64_t>(*y.FindAttr("q_col")), 0);
  EXPECT_EQ(y.inputs()[1].node, *f.FindNode("x"));
  EXPECT_EQ(y.inputs()[2].node, *f.FindNode("x"));
  int slices = 0;
  for (int id = 0; id < f.num_nodes(); ++id) slices += f.node(id).op() == "Slice";
  EXPECT_EQ(slices, 1);
}

// Queries and keys of different lengths at run time are refused, naming both.
TEST(SubgraphFusionTest, AnAttentionOfMismatchedBatchesFailsNamingTheShapes) {
  Scope root = AttentionScope(false, Shape{-1, -1, 3, 4});
  Session::Feeds feeds = AttentionFeeds(0);
  feeds[1].second = Tensor::FromVector(RandomFloats(3 * 5 * 12, 4), Shape{3, 5, 3, 4});  // k
  for (bool fuse : {false, true}) {
    SessionOptions options;
    options.fuse_epilogues = fuse;
    auto session = LocalSession::Create(root, options);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    auto out = (*session)->Run(feeds, {"y"});
    EXPECT_FALSE(out.ok());
    if (fuse) {
      EXPECT_TRUE(testing::MessageHas(out.status(), {"[2,5,3,4]", "[3,5,3,4]", "y"}))
          << out.status().ToString();
    }
  }
}

// A Transpose of the last two axes before a product goes altogether: the product transposes.
TEST(SubgraphFusionTest, ATransposeOfTheLastTwoAxesFoldsIntoTheProduct) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{2, 4, 3});
  auto b = ops::Placeholder(root.WithOpName("b"), DType::kF32, Shape{2, 5, 3});
  ops::BatchMatMul(root.WithOpName("y"), a, ops::Transpose(root, b, {0, 2, 1}));
  Session::Feeds feeds = {{"a", Tensor::FromVector(RandomFloats(24, 4), Shape{2, 4, 3})},
                          {"b", Tensor::FromVector(RandomFloats(30, 5), Shape{2, 5, 3})}};
  auto ops = ExpectSameWithFusion(root, feeds, {"y"}, 1e-5);
  EXPECT_EQ(ops["Transpose"], 0);
  EXPECT_EQ(ops["BatchMatMul"], 1);
}

// Scores the mask broadcasts to a larger shape (the product [1, H, S, S], the mask [2, 1, 1,
// S]) and a scale that is not a constant keep their ops.
TEST(SubgraphFusionTest, AScaledProductFusesOnlyWhereTheMaskBroadcastsToIt) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{1, 3, 5, 4});
  auto b = ops::Placeholder(root.WithOpName("b"), DType::kF32, Shape{1, 3, 4, 5});
  auto mask = ops::Placeholder(root.WithOpName("mask"), DType::kF32, Shape{2, 1, 1, 5});
  auto c = ops::Placeholder(root.WithOpName("c"), DType::kF32, Shape{});
  Output scores = ops::BatchMatMul(root, a, b);
  ops::Add(root.WithOpName("y"), ops::Div(root, scores, ops::Const(root, 2.f)), mask);
  ops::Add(root.WithOpName("z"), ops::Div(root, ops::BatchMatMul(root, a, b), c),
           ops::Const(root, 1.f));
  Session::Feeds feeds = {{"a", Tensor::FromVector(RandomFloats(60, 6), Shape{1, 3, 5, 4})},
                          {"b", Tensor::FromVector(RandomFloats(60, 7), Shape{1, 3, 4, 5})},
                          {"mask", Tensor::FromVector(RandomFloats(10, 8), Shape{2, 1, 1, 5})},
                          {"c", Tensor::Scalar<float>(3.f)}};
  auto ops = ExpectSameWithFusion(root, feeds, {"y", "z"}, 1e-5);
  EXPECT_EQ(ops["_ScaledBatchMatMul"], 0);
  EXPECT_EQ(ops["Div"], 2);
}

TEST(SubgraphFusionTest, ABiasOfAnotherShapeStaysAnAdd) {
  auto ops = LinearThroughReshape(Shape{5, 4});  // not one value per column
  EXPECT_EQ(ops["_FusedMatMul"], 0);
  EXPECT_EQ(ops["Add"], 1);
}

}  // namespace
}  // namespace dflow
