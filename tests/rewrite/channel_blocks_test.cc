// Blocked channel layouts (rewrite/channel_blocks.h): which nodes compute in the blocked
// layout, which fold into a convolution, and that the rewritten plan computes what the plain
// one does, NaN included (the run without the plan rewrites is the reference).
#include "rewrite/channel_blocks.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "framework/device_factory.h"
#include "graph/gradients.h"
#include "ops/conv_ops.h"
#include "ops/math_ops.h"
#include "ops/register.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "rewrite/fusion.h"
#include "rewrite_fixture.h"

namespace dflow {
namespace {

using testing::MessageHas;
using testing::RandomFloats;

class ChannelBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ops::RegisterStandardOps();
    block_ = DeviceFactory::Global().ChannelBlock("CPU");
    if (block_ == 0) GTEST_SKIP() << "this CPU has no blocked layout (AVX2 or better)";
  }
  int block_ = 0;
};

// Conv2D + a per-channel bias, as a model's layer (the epilogue fusion makes it _FusedConv2D).
Output ConvLayer(const Scope& s, Output x, int64_t c, int64_t o, int64_t k, uint32_t seed,
                 const ops::Conv2DAttrs& attrs) {
  Output y = ops::Conv2D(s, x, Const(s, {o, c / attrs.groups, k, k}, seed), attrs);
  return ops::Add(s, y, Const(s, {1, o, 1, 1}, seed + 1));
}

// A residual block, a max pool, a depthwise convolution clipped as ReLU6, an average pool and a
// global mean: every pattern the rewrite knows, 24 channels (not a multiple of 16).
Output SmallCnn(const Scope& root, Output x) {
  Output c1 = ops::Relu(root, ConvLayer(root, x, 3, 16, 3, 1, {.pads = {1, 1, 1, 1}}));
  Output c2 = ConvLayer(root, c1, 16, 24, 3, 3, {.pads = {1, 1, 1, 1}});
  Output r = ConvLayer(root, c1, 16, 24, 1, 5, {});
  Output s = ops::Relu(root, ops::Add(root, c2, r));
  Output p = ops::MaxPool(root, s, {});
  Output d = ConvLayer(root, p, 24, 24, 3, 7, {.pads = {1, 1, 1, 1}, .groups = 24});
  Output clipped =
      ops::Minimum(root, ops::Maximum(root, d, ops::Const(root, 0.f)), ops::Const(root, 6.f));
  Output a = ops::AvgPool(root, clipped, {});
  return ops::ReduceMean(root.WithOpName("y"), a, {2, 3});
}

TEST_F(ChannelBlocksTest, ConvolutionsPoolsAndTheirEpiloguesStayBlocked) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 3, 12, 12});
  SmallCnn(root, x);
  auto xv = Tensor::FromVector(RandomFloats(2 * 3 * 144, 11, -2, 2), Shape{2, 3, 12, 12});
  auto ops = ExpectSameWithFusion(root, {{"x", xv}}, {"y"});
  EXPECT_EQ(ops["_BlockedConv2D"], 4);
  EXPECT_EQ(ops["_BlockedMaxPool"], 1);
  EXPECT_EQ(ops["_BlockedAvgPool"], 1);
  EXPECT_EQ(ops["_UnblockChannels"], 1);  // before the global mean
  for (const char* gone :
       {"Conv2D", "_FusedConv2D", "Add", "Relu", "Maximum", "Minimum", "MaxPool", "AvgPool"}) {
    EXPECT_EQ(ops[gone], 0) << gone;
  }
}

TEST_F(ChannelBlocksTest, TheRewriteCountsWhatItFolds) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 3, 12, 12});
  SmallCnn(root, x);
  // The plan's graph before the layout pass: epilogue-fused, as the session builds it.
  Graph g = Validated(root);
  auto fused = ops::FuseEpilogues(g, {*g.FindNode("x"), *g.FindNode("y")});
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  auto blocked = ops::BlockChannels(
      fused->graph, {*fused->graph.FindNode("x"), *fused->graph.FindNode("y")}, block_);
  ASSERT_TRUE(blocked.ok()) << blocked.status().ToString();
  EXPECT_EQ(blocked->stats.convs, 4);
  EXPECT_EQ(blocked->stats.residuals, 1);
  EXPECT_EQ(blocked->stats.clips, 1);
  EXPECT_EQ(blocked->stats.pools, 2);
  EXPECT_EQ(blocked->stats.unblocks, 1);
  // The blocked tensors have the padded shape: 24 channels in ceil(24 / b) blocks of b.
  const Graph& bg = blocked->graph;
  for (int id = 0; id < bg.num_nodes(); ++id) {
    if (bg.node(id).op() != "_UnblockChannels") continue;
    const Endpoint in = bg.node(id).inputs()[0];
    EXPECT_EQ(bg.node(in.node).output_shape(0),
              Shape({2, (24 + block_ - 1) / block_, 3, 3, block_}));
    EXPECT_EQ(bg.node(id).output_shape(0), Shape({2, 24, 3, 3}));
  }
  auto bad = ops::BlockChannels(fused->graph, {}, 12);
  EXPECT_TRUE(MessageHas(bad.status(), {"channel block 12"}));
}

TEST_F(ChannelBlocksTest, FetchedValuesKeepTheirLayout) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1, 3, 12, 12});
  Output c1 =
      ops::Relu(root.WithOpName("c1"), ConvLayer(root, x, 3, 16, 3, 1, {.pads = {1, 1, 1, 1}}));
  ops::Relu(root.WithOpName("c2"), ConvLayer(root, c1, 16, 16, 3, 2, {}));
  auto xv = Tensor::FromVector(RandomFloats(3 * 144, 4, -2, 2), Shape{1, 3, 12, 12});
  // c1 is fetched, so its convolution stays plain; c2 reads it as NCHW.
  auto ops = ExpectSameWithFusion(root, {{"x", xv}}, {"c1", "c2"});
  EXPECT_EQ(ops["_BlockedConv2D"], 0);
  EXPECT_EQ(ops["_FusedConv2D"], 2);
}

// A training step keeps NCHW: its backward ops read the forward activations.
TEST_F(ChannelBlocksTest, ATrainingStepKeepsItsLayout) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 3, 12, 12});
  auto w = ops::Variable(root.WithOpName("w"), Shape{8, 3, 3, 3});
  Output y = ops::Relu(root, ops::Add(root, ops::Conv2D(root, x, w, {.pads = {1, 1, 1, 1}}),
                                      Const(root, {1, 8, 1, 1}, 3)));
  Output loss = ops::ReduceMean(root, ops::Square(root, y));
  auto grads = Gradients(root, loss, {w});
  ASSERT_TRUE(grads.ok()) << grads.status().ToString();
  Graph g = Validated(root);
  auto fused = ops::FuseEpilogues(g, {});
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  auto blocked = ops::BlockChannels(fused->graph, {}, block_);
  ASSERT_TRUE(blocked.ok()) << blocked.status().ToString();
  EXPECT_EQ(blocked->stats.convs, 0);
  EXPECT_EQ(OpCounts(blocked->graph)["_FusedConv2D"], 1);
}

// NaN and infinities reach the output where the plain plan puts them: through the ReLU that
// keeps NaN (inputs over 1 MiB), through the checked ReLU and clip post-ops (smaller ones) and
// through max pooling.
TEST_F(ChannelBlocksTest, NaNAndInfinitiesGoWhereThePlainPlanPutsThem) {
  for (int64_t side : {12, 160}) {
    Scope root = Scope::NewRootScope();
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 3, side, side});
    SmallCnn(root, x);
    std::vector<float> v = RandomFloats(2 * 3 * side * side, 12, -2, 2);
    v[5] = std::numeric_limits<float>::quiet_NaN();
    v[3 * side * side + 2 * side + 7] = std::numeric_limits<float>::infinity();
    v[v.size() - 3] = -std::numeric_limits<float>::infinity();
    auto xv = Tensor::FromVector(v, Shape{2, 3, side, side});
    ExpectSameWithFusion(root, {{"x", xv}}, {"y"});
  }
}

// ReLU6 both ways: an expanding 1x1 convolution checks its (smaller) input and clips as a
// post-op; a strided depthwise one, whose input outweighs its output, clips in a pass over the
// output. NaN and infinities land where the plain plan puts them either way.
TEST_F(ChannelBlocksTest, ClipsAsPostOpOrAfterKeepNaNAndInfinities) {
  for (bool with_nan : {false, true}) {
    Scope root = Scope::NewRootScope();
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1, 8, 20, 20});
    auto relu6 = [&](Output v) {
      return ops::Minimum(root, ops::Maximum(root, v, ops::Const(root, 0.f)),
                          ops::Const(root, 6.f));
    };
    Output c0 = ConvLayer(root, x, 8, 16, 1, 1, {});  // into the blocked layout
    Output e = relu6(ConvLayer(root, c0, 16, 48, 1, 3, {}));
    Output d = relu6(
        ConvLayer(root, e, 48, 48, 3, 5, {.strides = {2, 2}, .pads = {1, 1, 1, 1}, .groups = 48}));
    ops::Identity(root.WithOpName("y"), ConvLayer(root, d, 48, 16, 1, 7, {}));
    std::vector<float> v = RandomFloats(8 * 20 * 20, 21, -4, 4);
    if (with_nan) {
      v[17] = std::numeric_limits<float>::quiet_NaN();
      v[3 * 400 + 211] = std::numeric_limits<float>::infinity();
      v[7 * 400 + 399] = -std::numeric_limits<float>::infinity();
    }
    auto ops =
        ExpectSameWithFusion(root, {{"x", Tensor::FromVector(v, Shape{1, 8, 20, 20})}}, {"y"});
    // The expanding and depthwise convolutions as one _BlockedConvDw, which runs them one after
    // the other (as two _BlockedConv2D) on the NaN.
    EXPECT_EQ(ops["_BlockedConv2D"], 2);
    EXPECT_EQ(ops["_BlockedConvDw"], 1);
    EXPECT_EQ(ops["Minimum"], 0);
  }
}

// MobileNetV2's inverted residual block: an expanding 1x1 convolution and ReLU6, a depthwise
// 3x3 one (stride 1 or 2) and ReLU6, a projecting 1x1 one (and the residual at stride 1). The
// first two become one _BlockedConvDw: oneDNN's fused kernel at stride 2, its composition of the
// two over row chunks at stride 1 where the expanded activation outgrows the cache (4 MiB: the
// 112x112 image with 96 channels), the two one after the other below that and where the inputs'
// bounds do not rule out NaN (a NaN, an infinity). The values are the plain plan's.
TEST_F(ChannelBlocksTest, AnExpandingAndADepthwiseConvolutionRunAsOne) {
  for (int64_t stride : {1, 2}) {
    for (int64_t side : {12, 112}) {
      for (bool with_nan : {false, true}) {
        SCOPED_TRACE(fmt::format("stride {} side {}{}", stride, side, with_nan ? " NaN" : ""));
        Scope root = Scope::NewRootScope();
        auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1, 16, side, side});
        auto relu6 = [&](Output v) {
          return ops::Minimum(root, ops::Maximum(root, v, ops::Const(root, 0.f)),
                              ops::Const(root, 6.f));
        };
        Output c0 = ConvLayer(root, x, 16, 16, 1, 1, {});  // into the blocked layout
        Output e = relu6(ConvLayer(root, c0, 16, 96, 1, 3, {}));
        Output d =
            relu6(ConvLayer(root, e, 96, 96, 3, 5,
                            {.strides = {stride, stride}, .pads = {1, 1, 1, 1}, .groups = 96}));
        Output p = ConvLayer(root, d, 96, 16, 1, 7, {});
        ops::Identity(root.WithOpName("y"), stride == 1 ? ops::Add(root, p, c0) : p);
        std::vector<float> v = RandomFloats(16 * side * side, 41, -2, 2);
        if (with_nan) {
          v[side * 3 + 5] = std::numeric_limits<float>::quiet_NaN();
          v[9 * side * side + 2] = std::numeric_limits<float>::infinity();
        }
        auto ops = ExpectSameWithFusion(
            root, {{"x", Tensor::FromVector(v, Shape{1, 16, side, side})}}, {"y"});
        EXPECT_EQ(ops["_BlockedConvDw"], 1) << "stride " << stride << " side " << side;
        EXPECT_EQ(ops["_BlockedConv2D"], 2) << "stride " << stride << " side " << side;
      }
    }
  }
}

// The expanding convolution's output read elsewhere too (here fetched) keeps both convolutions.
TEST_F(ChannelBlocksTest, AnExpandedActivationReadElsewhereKeepsItsConvolution) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1, 16, 10, 10});
  Output c0 = ConvLayer(root, x, 16, 16, 1, 1, {});
  Output e = ops::Relu(root, ConvLayer(root, c0, 16, 32, 1, 3, {}));
  Output d = ConvLayer(root, e, 32, 32, 3, 5, {.pads = {1, 1, 1, 1}, .groups = 32});
  ops::Identity(root.WithOpName("y"), ops::Add(root, d, ops::Const(root, 1.f)));
  ops::Identity(root.WithOpName("z"), ops::Mul(root, e, ops::Const(root, 2.f)));
  auto ops = ExpectSameWithFusion(
      root, {{"x", Tensor::FromVector(RandomFloats(1600, 43, -2, 2), Shape{1, 16, 10, 10})}},
      {"y", "z"});
  EXPECT_EQ(ops["_BlockedConvDw"], 0);
}

// A global mean (ONNX's GlobalAveragePool) of a blocked tensor pools the whole image in the
// blocked layout, and only the means are unblocked; a mean that drops its dimensions, or over
// other axes, reads the image through an unblock. NaN and infinities reach the means.
TEST_F(ChannelBlocksTest, AGlobalMeanPoolsBeforeUnblocking) {
  for (bool with_nan : {false, true}) {
    Scope root = Scope::NewRootScope();
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 8, 9, 7});
    Output c = ops::Relu(root, ConvLayer(root, x, 8, 24, 3, 31, {.pads = {1, 1, 1, 1}}));
    Output m = ops::ReduceMean(root, c, {-1, 2}, {.keep_dims = true});
    ops::Identity(root.WithOpName("y"), ops::Mul(root, m, ops::Const(root, 2.f)));
    ops::Identity(root.WithOpName("z"), ops::ReduceMean(root, c, {2, 3}));
    ops::Identity(root.WithOpName("w"), ops::ReduceMean(root, c, {1, 2}, {.keep_dims = true}));
    std::vector<float> v = RandomFloats(2 * 8 * 9 * 7, 33, -3, 3);
    if (with_nan) {
      v[100] = std::numeric_limits<float>::quiet_NaN();
      v[8 * 63 + 5] = std::numeric_limits<float>::infinity();
    }
    auto ops = ExpectSameWithFusion(root, {{"x", Tensor::FromVector(v, Shape{2, 8, 9, 7})}},
                                    {"y", "z", "w"});
    EXPECT_EQ(ops["_BlockedAvgPool"], 1);
    EXPECT_EQ(ops["ReduceMean"], 2);        // no dimensions kept; channels reduced
    EXPECT_EQ(ops["_UnblockChannels"], 2);  // the means', and the image's for the other two
  }
}

}  // namespace
}  // namespace dflow
