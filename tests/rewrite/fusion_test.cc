// Epilogue fusion (rewrite/fusion.h): which chains fold, which must not, and that fused plans
// compute what the unfused ones do (the unfused run, with separate MatMul, BiasAdd, Add and Relu
// kernels, is the reference: ExpectSameWithFusion).
#include "rewrite/fusion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "graph/gradients.h"
#include "ops/array_ops.h"
#include "ops/conv_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/optimizers.h"
#include "ops/unary_ops.h"
#include "rewrite_fixture.h"
#include "runtime/local_session.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;
using testing::RandomFloats;

TEST(FusionTest, MatMulBiasReluChainsFold) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 6});
  auto h = ops::Relu(
      root.WithOpName("h"),
      ops::BiasAdd(root, ops::MatMul(root, x, Const(root, {6, 5}, 1)), Const(root, {5}, 2)));
  auto logits = ops::BiasAdd(root.WithOpName("logits"),
                             ops::MatMul(root, h, Const(root, {4, 5}, 3), {.transpose_b = true}),
                             Const(root, {4}, 4));
  ASSERT_TRUE(root.ok());
  Graph g = Validated(root);
  auto fused = ops::FuseEpilogues(g, {Id(g, x), Id(g, logits)});
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  EXPECT_EQ(fused->stats.matmul, 2);
  EXPECT_EQ(fused->stats.relu, 1);
  auto counts = OpCounts(fused->graph);
  EXPECT_EQ(counts["_FusedMatMul"], 2);
  EXPECT_EQ(counts["MatMul"] + counts["BiasAdd"] + counts["Relu"], 0);
  // The fused nodes took the chains' last names, and keep the transpose.
  const Node& h2 = fused->graph.node(*fused->graph.FindNode("h"));
  EXPECT_EQ(h2.op(), "_FusedMatMul");
  EXPECT_EQ(std::get<std::string>(*h2.FindAttr("activation")), "Relu");
  const Node& l2 = fused->graph.node(*fused->graph.FindNode("logits"));
  EXPECT_EQ(std::get<std::string>(*l2.FindAttr("activation")), "");
  EXPECT_TRUE(std::get<bool>(*l2.FindAttr("transpose_b")));

  auto xv = Tensor::FromVector(RandomFloats(7 * 6, 5, -2, 2), Shape{7, 6});
  auto ops_run = ExpectSameWithFusion(root, {{"x", xv}}, {"logits", "h"});
  // h is fetched too, so it keeps its own output; here it is still the fused node's.
  EXPECT_EQ(ops_run["_FusedMatMul"], 2);
}

TEST(FusionTest, RewritesToOpsTheDeviceLacksAreLeftOut) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 6});
  auto h = ops::Relu(
      root.WithOpName("h"),
      ops::BiasAdd(root, ops::MatMul(root, x, Const(root, {6, 5}, 1)), Const(root, {5}, 2)));
  Graph g = Validated(root);
  std::vector<std::string> asked;
  auto fused = ops::FuseEpilogues(g, {Id(g, x), Id(g, h)}, [&](const char* op) {
    asked.push_back(op);
    return std::string(op) != "_FusedMatMul";
  });
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  EXPECT_EQ(fused->stats.matmul, 0);
  auto counts = OpCounts(fused->graph);
  EXPECT_EQ(counts["_FusedMatMul"], 0);
  EXPECT_EQ(counts["MatMul"] + counts["BiasAdd"] + counts["Relu"], 3);
  EXPECT_NE(std::find(asked.begin(), asked.end(), "_FusedMatMul"), asked.end());
}

TEST(FusionTest, ConvBiasReluChainsFoldWithEitherBiasLayout) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 3, 8, 8});
  auto c1 = ops::Conv2D(root, x, Const(root, {4, 3, 3, 3}, 1), {.pads = {1, 1, 1, 1}});
  auto y1 = ops::Relu(root.WithOpName("y1"), ops::Add(root, c1, Const(root, {1, 4, 1, 1}, 2)));
  auto c2 = ops::Conv2D(root, y1, Const(root, {2, 4, 3, 3}, 3), {.strides = {2, 2}});
  ops::Add(root.WithOpName("y2"), Const(root, {2, 1, 1}, 4), c2);  // bias on the left
  ASSERT_TRUE(root.ok());
  auto xv = Tensor::FromVector(RandomFloats(2 * 3 * 64, 5, -2, 2), Shape{2, 3, 8, 8});
  auto counts = ExpectSameWithFusion(root, {{"x", xv}}, {"y2"});
  // Where the CPU has a blocked layout, the first (not fetched) computes in it
  // (rewrite/channel_blocks.h).
  EXPECT_EQ(counts["_FusedConv2D"] + counts["_BlockedConv2D"], 2);
  EXPECT_EQ(counts["Conv2D"] + counts["Add"] + counts["Relu"], 0);
}

TEST(FusionTest, ChainsThatMustNotFold) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{3, 4});
  auto w = Const(root, {4, 4}, 1);
  auto b = Const(root, {4}, 2);
  // 1. The product is fetched.
  auto mm1 = ops::MatMul(root.WithOpName("mm1"), x, w);
  auto out1 = ops::BiasAdd(root.WithOpName("out1"), mm1, b);
  // 2. The product has a second reader.
  auto mm2 = ops::MatMul(root.WithOpName("mm2"), x, w);
  auto out2 = ops::Add(root.WithOpName("out2"), ops::BiasAdd(root, mm2, b), mm2);
  // 3. f64.
  auto x64 = ops::Cast(root, x, DType::kF64);
  auto out3 =
      ops::BiasAdd(root.WithOpName("out3"), ops::MatMul(root, x64, ops::Cast(root, w, DType::kF64)),
                   ops::Cast(root, b, DType::kF64));
  // 4. A node waits on the product through a control edge.
  auto mm4 = ops::MatMul(root.WithOpName("mm4"), x, w);
  auto out4 = ops::BiasAdd(root.WithOpName("out4"), mm4, b);
  auto waiter = ops::Identity(root.WithOpName("waiter").WithControlDependencies({mm4}), x);
  // 5. Another requested device on the bias.
  auto mm5 = ops::MatMul(root.WithOpName("mm5"), x, w);
  auto out5 = ops::BiasAdd(root.WithOpName("out5").WithDevice("cpu:0"), mm5, b);
  // 6. The BiasAdd is read twice: the MatMul and bias fold, the Relu stays.
  auto ba6 = ops::BiasAdd(root.WithOpName("ba6"), ops::MatMul(root, x, w), b);
  auto out6 = ops::Add(root.WithOpName("out6"), ops::Relu(root.WithOpName("relu6"), ba6), ba6);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  Graph g = Validated(root);
  std::vector<int> keep = {Id(g, x), Id(g, mm1)};
  for (const Output& o : std::vector<Output>{out1, out2, out3, out4, waiter, out5, out6}) {
    keep.push_back(Id(g, o));
  }
  auto fused = ops::FuseEpilogues(g, keep);
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  EXPECT_EQ(fused->stats.matmul, 1);  // case 6 only
  EXPECT_EQ(fused->stats.relu, 0);
  const Graph& f = fused->graph;
  EXPECT_EQ(f.node(*f.FindNode("ba6")).op(), "_FusedMatMul");
  EXPECT_EQ(f.node(*f.FindNode("relu6")).op(), "Relu");
  for (const char* name : {"mm1", "mm2", "mm4", "mm5"}) {
    EXPECT_EQ(f.node(*f.FindNode(name)).op(), "MatMul") << name;
  }
  auto xv = Tensor::FromVector(RandomFloats(12, 3, -2, 2), Shape{3, 4});
  ExpectSameWithFusion(root, {{"x", xv}}, {"out1", "mm1", "out2", "out4", "out5", "out6"});
}

TEST(FusionTest, ControlInputsOfFoldedNodesMoveToTheFusedNode) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 2});
  auto first = ops::Identity(root.WithOpName("first"), x);
  auto mm = ops::MatMul(root, x, Const(root, {2, 2}, 1));
  auto y =
      ops::BiasAdd(root.WithOpName("y").WithControlDependencies({first}), mm, Const(root, {2}, 2));
  Graph g = Validated(root);
  auto fused = ops::FuseEpilogues(g, {Id(g, x), Id(g, y)});
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  const Node& n = fused->graph.node(*fused->graph.FindNode("y"));
  EXPECT_EQ(n.op(), "_FusedMatMul");
  ASSERT_EQ(n.control_inputs().size(), 1u);
  EXPECT_EQ(fused->graph.node(n.control_inputs()[0]).name(), "first");
}

// Training: ReLU's gradient reads its output, so the forward chain folds whole; the losses over
// a few SGD steps match the unfused session's.
TEST(FusionTest, TrainingStepsMatchUnfused) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 5});
  auto w1 = ops::Placeholder(root.WithOpName("w1"), DType::kF32, Shape{5, 8});
  auto b1 = ops::Placeholder(root.WithOpName("b1"), DType::kF32, Shape{8});
  auto w2 = ops::Placeholder(root.WithOpName("w2"), DType::kF32, Shape{8, 1});
  auto h = ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, x, w1), b1));
  auto y = ops::MatMul(root, h, w2);
  auto loss = ops::ReduceSum(root.WithOpName("loss"), ops::Mul(root, y, y));
  auto grads = Gradients(root, loss, {w1, b1, w2});
  ASSERT_TRUE(grads.ok()) << grads.status().ToString();
  Session::Feeds feeds = {{"x", Tensor::FromVector(RandomFloats(6 * 5, 1, -2, 2), Shape{6, 5})},
                          {"w1", Tensor::FromVector(RandomFloats(40, 2), Shape{5, 8})},
                          {"b1", Tensor::FromVector(RandomFloats(8, 3), Shape{8})},
                          {"w2", Tensor::FromVector(RandomFloats(8, 4), Shape{8, 1})}};
  std::vector<std::string> fetches = {"loss"};
  for (const auto& g : *grads) fetches.push_back(g.name());
  auto counts = ExpectSameWithFusion(root, feeds, fetches);
  EXPECT_EQ(counts["_FusedMatMul"], 1);
  EXPECT_EQ(counts["Relu"], 0);
}

// SGD on a two-layer network: both weight gradients fold into their updates; three steps give
// the unfused weights, and a value fetched before a step stays a snapshot.
TEST(FusionTest, WeightGradientsFoldIntoSgdUpdates) {
  std::vector<std::vector<float>> w1_after(2);
  for (bool fuse : {false, true}) {
    Scope root = Scope::NewRootScope();
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 5});
    auto w1 = ops::InitializedVariable(root.WithOpName("w1"), Shape{5, 8},
                                       ops::Initializer::GlorotUniform(1));
    auto b1 = ops::InitializedVariable(root.WithOpName("b1"), Shape{8}, ops::Initializer::Zeros());
    auto w2 = ops::InitializedVariable(root.WithOpName("w2"), Shape{8, 3},
                                       ops::Initializer::GlorotUniform(2));
    auto h = ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, x, w1.var), b1.var));
    auto y = ops::MatMul(root, h, w2.var);
    auto loss = ops::ReduceSum(root.WithOpName("loss"), ops::Mul(root, y, y));
    ops::SGD sgd({.learning_rate = 0.05});
    auto step = sgd.Minimize(root, loss, {w1.var, b1.var, w2.var});
    ASSERT_TRUE(root.ok()) << root.status().ToString();
    if (fuse) {
      Graph g = Validated(root);
      auto fused = ops::FuseEpilogues(g, {Id(g, x), Id(g, loss), *g.FindNode(step.name())});
      ASSERT_TRUE(fused.ok()) << fused.status().ToString();
      EXPECT_EQ(fused->stats.sgd, 2);  // w1 and w2; b1's gradient is a reduction
      EXPECT_EQ(OpCounts(fused->graph)["_MatMulApplySGD"], 2);
    }
    SessionOptions options;
    options.fuse_epilogues = fuse;
    auto session = Session::Create(root, options);
    ASSERT_TRUE(session.ok());
    ASSERT_TRUE((*session)
                    ->Run({}, {}, {w1.init.node_name(), b1.init.node_name(), w2.init.node_name()})
                    .ok());
    auto xv = Tensor::FromVector(RandomFloats(4 * 5, 9, -2, 2), Shape{4, 5});
    auto before = (*session)->Run({}, {w1.var.name()});
    ASSERT_TRUE(before.ok());
    std::vector<float> snapshot = before->at(0).ToVector<float>();
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE((*session)->Run({{"x", xv}}, {"loss"}, {step.name()}).ok());
    }
    EXPECT_EQ(before->at(0).ToVector<float>(), snapshot);  // held across in-place updates
    auto after = (*session)->Run({}, {w1.var.name()});
    ASSERT_TRUE(after.ok());
    w1_after[fuse] = after->at(0).ToVector<float>();
    EXPECT_NE(w1_after[fuse], snapshot);
  }
  ASSERT_EQ(w1_after[0].size(), w1_after[1].size());
  for (size_t i = 0; i < w1_after[0].size(); ++i) EXPECT_NEAR(w1_after[0][i], w1_after[1][i], 1e-5);
}

// A product added to a tensor of its shape: a running sum of weight gradients (the pipeline's
// accumulation) folds each MatMul into its Add; a product read twice, a broadcast addend and a
// fetched product stay as they are.
TEST(FusionTest, ProductsFoldIntoTheAddsThatSumThem) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Placeholder(root.WithOpName("a"), DType::kF32, Shape{6, 5});
  auto b = ops::Placeholder(root.WithOpName("b"), DType::kF32, Shape{6, 4});
  auto g0 = ops::MatMul(root.WithOpName("g0"), a, b, {.transpose_a = true});
  auto g1 = ops::MatMul(root.WithOpName("g1"), a, Const(root, {6, 4}, 1), {.transpose_a = true});
  auto g2 = ops::MatMul(root.WithOpName("g2"), a, Const(root, {6, 4}, 2), {.transpose_a = true});
  auto sum = ops::Add(root.WithOpName("sum"), ops::Add(root, g0, g1), g2);
  // g3 is read twice; the bias [4] broadcasts; g4 is fetched.
  auto g3 = ops::MatMul(root.WithOpName("g3"), a, b, {.transpose_a = true});
  auto twice = ops::Add(root.WithOpName("twice"), g3, ops::Neg(root, g3));
  auto g4 = ops::MatMul(root.WithOpName("g4"), a, b, {.transpose_a = true});
  auto kept = ops::Add(root.WithOpName("kept"), g4, sum);
  auto bias = ops::Add(root.WithOpName("bias"),
                       ops::MatMul(root.WithOpName("g5"), a, b, {.transpose_a = true}),
                       Const(root, {4}, 3));
  ASSERT_TRUE(root.ok());
  Graph g = Validated(root);
  auto fused = ops::FuseEpilogues(
      g, {Id(g, a), Id(g, b), Id(g, sum), Id(g, twice), Id(g, g4), Id(g, kept), Id(g, bias)});
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  // Add(g0, g1) takes g1 and the outer Add takes g2; `kept`'s product g4 is fetched, so it
  // keeps its own output.
  EXPECT_EQ(fused->stats.accumulate, 2);
  auto counts = OpCounts(fused->graph);
  EXPECT_EQ(counts["_MatMulAdd"], 2);
  EXPECT_EQ(fused->graph.node(*fused->graph.FindNode("sum")).op(), "_MatMulAdd");
  EXPECT_EQ(fused->graph.node(*fused->graph.FindNode("twice")).op(), "Add");
  EXPECT_EQ(fused->graph.node(*fused->graph.FindNode("kept")).op(), "Add");
  EXPECT_EQ(fused->graph.node(*fused->graph.FindNode("bias")).op(), "Add");
  EXPECT_FALSE(fused->graph.FindNode("g2").has_value());

  auto av = Tensor::FromVector(RandomFloats(6 * 5, 3, -2, 2), Shape{6, 5});
  auto bv = Tensor::FromVector(RandomFloats(6 * 4, 4, -2, 2), Shape{6, 4});
  auto ran =
      ExpectSameWithFusion(root, {{"a", av}, {"b", bv}}, {"sum", "twice", "g4", "kept", "bias"});
  EXPECT_EQ(ran["_MatMulAdd"], 2);
}

// Pooling keeps its argmax: the backward pass stops reading the pool's input, and a ReluGrad
// on that input becomes a mask on the pooled values. Overlapping padded windows and plain 2x2
// ones, with and without a ReLU below, against the unfused gradients.
TEST(FusionTest, MaxPoolKeepsArgmaxAndMasksTheReluGradient) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 2, 9, 8});
  auto w = ops::Placeholder(root.WithOpName("w"), DType::kF32, Shape{3, 2, 3, 3});
  auto conv = ops::Conv2D(root, x, w, {.pads = {1, 1, 1, 1}});
  auto act = ops::Relu(root, ops::Add(root, conv, Const(root, {1, 3, 1, 1}, 1)));
  auto p1 = ops::MaxPool(root, act, {.ksize = {3, 3}, .strides = {2, 2}, .pads = {1, 1, 1, 1}});
  auto p2 = ops::MaxPool(root, p1, {.ksize = {2, 2}, .strides = {2, 2}});  // no ReLU below
  auto loss = ops::ReduceSum(root.WithOpName("loss"), ops::Mul(root, p2, p2));
  auto grads = Gradients(root, loss, {w, x});
  ASSERT_TRUE(grads.ok()) << grads.status().ToString();
  Session::Feeds feeds = {
      {"x", Tensor::FromVector(RandomFloats(2 * 2 * 9 * 8, 1, -2, 2), Shape{2, 2, 9, 8})},
      {"w", Tensor::FromVector(RandomFloats(3 * 2 * 9, 2), Shape{3, 2, 3, 3})}};
  auto counts =
      ExpectSameWithFusion(root, feeds, {"loss", grads->at(0).name(), grads->at(1).name()});
  EXPECT_EQ(counts["_MaxPoolWithArgmax"], 2);
  EXPECT_EQ(counts["_MaxPoolGradWithArgmax"], 2);
  EXPECT_EQ(counts["MaxPool"] + counts["MaxPoolGrad"] + counts["ReluGrad"], 0);

  Graph g = Validated(root);
  std::vector<int> keep = {Id(g, x), Id(g, w), Id(g, loss), Id(g, grads->at(0)),
                           Id(g, grads->at(1))};
  auto fused = ops::FuseEpilogues(g, keep);
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  EXPECT_EQ(fused->stats.pool, 2);
  EXPECT_EQ(fused->stats.pool_relu, 1);
  // The activation (the fused convolution's output) is read by the forward pool alone now.
  const Graph& f = fused->graph;
  int act_id = *f.FindNode(act.node_name());
  EXPECT_EQ(f.node(act_id).op(), "_FusedConv2D");
  auto consumers = f.Consumers()[act_id];
  ASSERT_EQ(consumers.size(), 1u);
  EXPECT_EQ(f.node(consumers[0].first).op(), "_MaxPoolWithArgmax");
}

TEST(FusionTest, BadBiasAtRunTimeNamesTheFusedNode) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 3});
  auto b = ops::Placeholder(root.WithOpName("b"), DType::kF32);  // shape unknown until run time
  ops::Relu(root.WithOpName("y"),
            ops::BiasAdd(root, ops::MatMul(root, x, Const(root, {3, 4}, 1)), b));
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok());
  auto r = (*session)->Run({{"x", Tensor::FromVector(RandomFloats(6, 1), Shape{2, 3})},
                            {"b", Tensor::FromVector(RandomFloats(5, 2), Shape{5})}},
                           {"y"});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(r.status(), {"'y'", "_FusedMatMul", "bias", "(4)"}));
}

TEST(FusionTest, NeedsAValidatedGraph) {
  Graph g;
  EXPECT_EQ(ops::FuseEpilogues(g, {}).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace dflow
