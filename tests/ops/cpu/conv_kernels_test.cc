// The CPU convolution's NaN handling across a chain of convolutions (ops/cpu/conv_kernels.cc): a
// convolution that clipped finite inputs, or one of bounded inputs and constant weights, vouches
// for its output (Tensor::known_bound), the next one trusts it instead of checking, a bound too
// large to rule out an overflow is measured again, an overflow comes out as the unfused ops give
// it, and nothing that changes a value keeps the bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "framework/device_factory.h"
#include "ops/array_ops.h"
#include "ops/register.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "runtime/local_session.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::RandomFloats;

constexpr int64_t kIn = 8;  // the expanding convolution's input channels
constexpr int64_t kChannels = 16;
constexpr int64_t kSide = 10;

class ConvChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ops::RegisterStandardOps();
    block_ = DeviceFactory::Global().ChannelBlock("CPU");
    if (block_ == 0) GTEST_SKIP() << "this CPU has no blocked layout (AVX2 or better)";
  }

  // y = clip(conv(x, w) + bias, 0, 6) in the blocked layout: a 1x1 convolution of a plain x of
  // kIn channels (it writes twice what it reads, so it checks its input and clips as a post-op),
  // or a 3x3 depthwise one of stride 2 of a blocked x (it reads 4x what it writes, so unless its
  // input is marked finite it clips in a pass over its output, unchecked).
  Output ClippedConv(const Scope& s, const std::string& name, Output x, bool depthwise,
                     uint32_t seed) const {
    const Shape w_shape = depthwise ? Shape{kChannels, 1, 3, 3} : Shape{kChannels, kIn, 1, 1};
    Output w = ops::Const(
        s, Tensor::FromVector(RandomFloats(w_shape.num_elements(), seed, -1, 1), w_shape));
    Output b = ops::Const(
        s, Tensor::FromVector(RandomFloats(kChannels, seed + 1, 0, 1), Shape{kChannels}));
    std::vector<int64_t> pads =
        depthwise ? std::vector<int64_t>{1, 1, 1, 1} : std::vector<int64_t>{0, 0, 0, 0};
    std::vector<int64_t> strides =
        depthwise ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{1, 1};
    const Scope named = s.WithOpName(name);
    return named.OutputOf(named.AddNode("_BlockedConv2D", {x, w, b},
                                        {{"strides", strides},
                                         {"pads", pads},
                                         {"dilations", std::vector<int64_t>{1, 1}},
                                         {"groups", depthwise ? kChannels : int64_t{1}},
                                         {"block", static_cast<int64_t>(block_)},
                                         {"x_blocked", depthwise},
                                         {"activation", std::string("Clip")},
                                         {"clip_min", 0.0},
                                         {"clip_max", 6.0}}));
  }

  Shape BlockedShape(int64_t side) const {
    return Shape{1, kChannels / block_, side, side, static_cast<int64_t>(block_)};
  }

  int block_ = 0;
};

int CountNaN(const Tensor& t) {
  int n = 0;
  for (float v : t.ToVector<float>()) n += std::isnan(v);
  return n;
}

// Expanding 1x1 then depthwise, both clipped, as in MobileNetV2: finite inputs give outputs
// marked finite; a NaN in x leaves both unmarked and reaches the depthwise output.
TEST_F(ConvChainTest, AClippedConvolutionOfFiniteInputsVouchesForItsOutput) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1, kIn, kSide, kSide});
  Output e = ClippedConv(root, "expand", x, false, 3);
  ClippedConv(root, "depthwise", e, true, 5);
  auto session = LocalSession::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  for (bool with_nan : {false, true}) {
    std::vector<float> v = RandomFloats(kIn * kSide * kSide, 7, -3, 3);
    // Channel 5, row 5, column 5: four windows of the depthwise convolution see it.
    if (with_nan) v[5 * kSide * kSide + 55] = std::numeric_limits<float>::quiet_NaN();
    auto out = (*session)->Run({{"x", Tensor::FromVector(v, Shape{1, kIn, kSide, kSide})}},
                               {"expand", "depthwise"});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const Tensor& expand = out->at(0);
    const Tensor& depthwise = out->at(1);
    EXPECT_EQ(expand.known_finite(), !with_nan);
    EXPECT_EQ(depthwise.known_finite(), !with_nan);
    // The 1x1 convolution puts the NaN in every channel of its pixel; each depthwise output
    // that sees that pixel (a 3x3 window of stride 2) keeps it.
    EXPECT_EQ(CountNaN(expand), with_nan ? kChannels : 0);
    EXPECT_EQ(CountNaN(depthwise), with_nan ? kChannels * 4 : 0);
    for (float y : depthwise.ToVector<float>()) {
      if (!std::isnan(y)) {
        ASSERT_TRUE(y >= 0 && y <= 6) << y;
      }
    }
  }
}

// The depthwise convolution trusts the mark: the same input with a NaN, marked and unmarked.
// Unmarked, it checks and the NaN comes through; marked, the clip runs as oneDNN's post-op
// without a check and turns it into the lower bound. (Only a kernel that computed the value may
// mark it; this test marks a bad one to see that the check is skipped.)
TEST_F(ConvChainTest, AMarkedInputIsNotChecked) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, BlockedShape(kSide));
  ClippedConv(root, "depthwise", x, true, 5);
  auto session = LocalSession::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  std::vector<float> v = RandomFloats(kChannels * kSide * kSide, 9, 0, 6);
  v[13 * block_ + 1] = std::numeric_limits<float>::quiet_NaN();  // row 1, column 3: 4 windows
  for (bool marked : {false, true}) {
    Tensor in = Tensor::FromVector(v, BlockedShape(kSide));
    in.set_known_bound(marked ? 6.f : std::numeric_limits<float>::infinity());
    auto out = (*session)->Run({{"x", in}}, {"depthwise"});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(CountNaN(out->at(0)), marked ? 0 : 4) << (marked ? "marked" : "unmarked");
    EXPECT_EQ(out->at(0).known_finite(), marked);
  }
}

// A kernel that overwrites a marked value in place (Log, the last reader of the depthwise
// output, forwards its buffer) and a variable that takes a marked value's buffer drop the mark;
// the convolutions themselves keep it.
TEST_F(ConvChainTest, WritersInPlaceDropTheMark) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, BlockedShape(kSide));
  Output d = ClippedConv(root, "depthwise", x, true, 5);
  ops::Log(root.WithOpName("log"), d);
  Output d2 = ClippedConv(root, "depthwise2", x, true, 11);
  auto var = ops::Variable(root.WithOpName("v"), BlockedShape(kSide / 2));
  ops::Assign(root.WithOpName("assign"), var, d2);
  auto session = LocalSession::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  // Inputs far below 0 make the clip's lower bound certain somewhere, so log gives -inf there.
  // Finite, and marked so, as a clipped convolution's output would be.
  Tensor in =
      Tensor::FromVector(RandomFloats(kChannels * kSide * kSide, 13, -40, 6), BlockedShape(kSide));
  in.set_known_bound(40);
  auto out = (*session)->Run({{"x", in}}, {"log", "assign"});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  auto marks = (*session)->Run({{"x", in}}, {"depthwise", "depthwise2"});
  ASSERT_TRUE(marks.ok()) << marks.status().ToString();
  EXPECT_TRUE(marks->at(0).known_finite());
  EXPECT_TRUE(marks->at(1).known_finite());
  const Tensor& log = out->at(0);
  int infinities = 0;
  for (float y : log.ToVector<float>()) infinities += std::isinf(y);
  EXPECT_GT(infinities, 0);
  EXPECT_FALSE(log.known_finite());
  EXPECT_FALSE(out->at(1).known_finite());
}

// A _BlockedConv2D with a ReLU (or `activation`) and a bias, in the blocked layout (x plain unless
// x_blocked), adding `residual` when given; its weights and bias are Consts, or Placeholders named
// NAME/w and NAME/b when `fed` (weights that are not constant give no bound).
struct LayerSpec {
  int64_t in, out, k = 1, stride = 1;
  bool x_blocked = true;
};

class ConvBoundsTest : public ConvChainTest {
 protected:
  Output ReluConv(const Scope& s, const std::string& name, Output x, const LayerSpec& l,
                  const std::vector<float>& w, const std::vector<float>& b, bool fed,
                  std::optional<Output> residual = std::nullopt,
                  const std::string& activation = "Relu") {
    const Shape w_shape{l.out, l.in, l.k, l.k};
    Output wo = fed ? ops::Placeholder(s.WithOpName(name + "/w"), DType::kF32, w_shape)
                    : ops::Const(s, Tensor::FromVector(w, w_shape));
    Output bo = fed ? ops::Placeholder(s.WithOpName(name + "/b"), DType::kF32, Shape{l.out})
                    : ops::Const(s, Tensor::FromVector(b, Shape{l.out}));
    if (fed) {
      feeds_.emplace_back(name + "/w", Tensor::FromVector(w, w_shape));
      feeds_.emplace_back(name + "/b", Tensor::FromVector(b, Shape{l.out}));
    }
    const int64_t pad = l.k / 2;
    std::vector<Output> ins = {x, wo, bo};
    if (residual) ins.push_back(*residual);
    const Scope named = s.WithOpName(name);
    return named.OutputOf(named.AddNode("_BlockedConv2D", ins,
                                        {{"strides", std::vector<int64_t>{l.stride, l.stride}},
                                         {"pads", std::vector<int64_t>{pad, pad, pad, pad}},
                                         {"dilations", std::vector<int64_t>{1, 1}},
                                         {"groups", int64_t{1}},
                                         {"block", static_cast<int64_t>(block_)},
                                         {"x_blocked", l.x_blocked},
                                         {"activation", activation},
                                         {"clip_min", 0.0},
                                         {"clip_max", 0.0}}));
  }

  Output Pool(const Scope& s, const std::string& name, const std::string& op, Output x,
              int64_t channels, int64_t k, int64_t stride, int64_t pad) const {
    const Scope named = s.WithOpName(name);
    return named.OutputOf(named.AddNode(op, {x},
                                        {{"T", DType::kF32},
                                         {"ksize", std::vector<int64_t>{k, k}},
                                         {"strides", std::vector<int64_t>{stride, stride}},
                                         {"pads", std::vector<int64_t>{pad, pad, pad, pad}},
                                         {"channels", channels}}));
  }

  std::vector<Tensor> Run(const Scope& root, const std::vector<std::string>& fetches) {
    auto session = LocalSession::Create(root);
    EXPECT_TRUE(session.ok()) << session.status().ToString();
    if (!session.ok()) return {};
    auto out = (*session)->Run(feeds_, fetches);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : std::vector<Tensor>{};
  }

  Session::Feeds feeds_;
};

float MaxMagnitude(const Tensor& t) {
  float most = 0;
  for (float v : t.ToVector<float>()) most = std::max(most, std::fabs(v));
  return most;
}

// A residual block (1x1, a 3x3 on Winograd, a 1x1 adding the block's input), a max pool and an
// average pool with constant weights: every output is bounded and within its bound, and equals
// the same chain's with the weights fed (which gives no bounds beyond the checked ones).
TEST_F(ConvBoundsTest, EachOutputIsWithinItsBound) {
  const std::vector<std::string> names = {"c1", "c2", "c3", "max", "avg"};
  std::vector<std::vector<Tensor>> runs;
  for (bool fed : {false, true}) {
    feeds_.clear();
    Scope root = Scope::NewRootScope();
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, kIn, kSide, kSide});
    feeds_.emplace_back("x", Tensor::FromVector(RandomFloats(2 * kIn * kSide * kSide, 21, -3, 3),
                                                Shape{2, kIn, kSide, kSide}));
    auto weights = [](const LayerSpec& l, uint32_t seed) {
      return RandomFloats(l.out * l.in * l.k * l.k, seed, -0.5, 0.5);
    };
    const LayerSpec l1{kIn, kChannels, 1, 1, false}, l2{kChannels, kChannels, 3},
        l3{kChannels, kChannels};
    Output c1 = ReluConv(root, "c1", x, l1, weights(l1, 1), RandomFloats(kChannels, 2), fed);
    Output c2 = ReluConv(root, "c2", c1, l2, weights(l2, 3), RandomFloats(kChannels, 4), fed);
    Output c3 = ReluConv(root, "c3", c2, l3, weights(l3, 5), RandomFloats(kChannels, 6), fed, c1);
    Output m = Pool(root, "max", "_BlockedMaxPool", c3, kChannels, 3, 2, 1);
    Pool(root, "avg", "_BlockedAvgPool", m, kChannels, 2, 1, 0);
    runs.push_back(Run(root, names));
    ASSERT_EQ(runs.back().size(), names.size());
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const Tensor& bounded = runs[0][i];
    EXPECT_TRUE(bounded.known_finite()) << names[i];
    EXPECT_LE(MaxMagnitude(bounded), bounded.known_bound()) << names[i];
    // Fed weights: c1 checked its (small) input for the ReLU post-op, but no output has a bound.
    EXPECT_FALSE(runs[1][i].known_finite()) << names[i];
    const float scale = MaxMagnitude(runs[1][i]);
    ASSERT_GT(scale, 0) << names[i];
    std::vector<float> a = bounded.ToVector<float>(), b = runs[1][i].ToVector<float>();
    for (size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(a[j], b[j], 1e-5 * scale) << names[i];
  }
}

// Seven 1x1 convolutions whose weight rows sum to 1.6e8 in magnitude but cancel on their inputs
// (+s on even channels, -s on odd ones, on inputs equal across channels): the bound grows by
// 1.6e8 a layer while the values stay at the bias, so by the fifth layer it no longer rules out an
// overflow, that layer measures its input, and the last bound is finite and far below the
// product of the norms (1.6e8^7 = 2.7e57). The values are the bias throughout.
TEST_F(ConvBoundsTest, ABoundTooLargeIsMeasuredAgain) {
  constexpr float kScale = 1e7f;
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1, kChannels, 4, 4});
  feeds_.emplace_back("x", Tensor::FromVector(std::vector<float>(kChannels * 16, 0.25f),
                                              Shape{1, kChannels, 4, 4}));
  std::vector<float> w(kChannels * kChannels);
  for (int64_t o = 0; o < kChannels; ++o) {
    for (int64_t c = 0; c < kChannels; ++c) w[o * kChannels + c] = c % 2 == 0 ? kScale : -kScale;
  }
  Output y = x;
  std::vector<std::string> names;
  for (int i = 0; i < 7; ++i) {
    names.push_back("c" + std::to_string(i));
    y = ReluConv(root, names.back(), y, {kChannels, kChannels, 1, 1, i > 0}, w,
                 std::vector<float>(kChannels, 0.5f), false);
  }
  std::vector<Tensor> out = Run(root, names);
  ASSERT_EQ(out.size(), names.size());
  for (size_t i = 0; i < out.size(); ++i) {
    for (float v : out[i].ToVector<float>()) ASSERT_EQ(v, 0.5f) << names[i];
    ASSERT_TRUE(out[i].known_finite()) << names[i];
    EXPECT_GE(out[i].known_bound(), 0.5f) << names[i];
  }
  // c0 measured x: 0.25 * 1.6e8 + 0.5.
  EXPECT_GT(out[0].known_bound(), 3.9e7f);
  EXPECT_LT(out[0].known_bound(), 4.1e7f);
  EXPECT_GT(out[1].known_bound(), out[0].known_bound() * 1e8f);
  EXPECT_GT(out[2].known_bound(), out[1].known_bound() * 1e8f);
  // c3's bound would have been about 1.6e32, and times 1.6e8 past the float range, so its
  // reader c4 measured it (0.5) and noted that on the value both share.
  EXPECT_EQ(out[3].known_bound(), 0.5f);
  EXPECT_LT(out[4].known_bound(), 1e9f);
  EXPECT_GT(out[5].known_bound(), out[4].known_bound() * 1e8f);
  EXPECT_GT(out[6].known_bound(), out[5].known_bound() * 1e8f);
  EXPECT_LT(out[6].known_bound(), 1e26f);
}

// Weights of 1e20 on inputs of 1e20: the products pass the float range (a channel of positive
// weights gives +inf, one of negative weights -inf, one of both signs whatever the order of the
// sums makes of it), so the bound rules out nothing: the ReLU runs after the direct convolution
// and keeps what it gave, NaN included (oneDNN's ReLU post-op would make NaN 0, and Winograd's
// transforms spread NaN). The reference: the same convolution without an activation, then a
// ReLU that keeps NaN. For 1x1 and for 3x3 (where Winograd would be taken).
TEST_F(ConvBoundsTest, AnOverflowGivesWhatTheUnfusedOpsGive) {
  for (int64_t k : {1, 3}) {
    std::vector<std::vector<float>> results;
    for (const char* act : {"Relu", ""}) {
      feeds_.clear();
      Scope root = Scope::NewRootScope();
      auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1, kIn, 4, 4});
      feeds_.emplace_back(
          "x", Tensor::FromVector(RandomFloats(kIn * 16, 31, 0.5e20f, 1e20f), Shape{1, kIn, 4, 4}));
      std::vector<float> w = RandomFloats(kChannels * kIn * k * k, 33, 0.5e20f, 1e20f);
      const int64_t row = kIn * k * k;
      for (int64_t o = 0; o < kChannels; ++o) {
        for (int64_t j = 0; j < row; ++j) {
          if (o % 3 == 2 || (o % 3 == 1 && j % 2 == 1)) w[o * row + j] = -w[o * row + j];
        }
      }
      ReluConv(root, "c", x, {kIn, kChannels, k, 1, false}, w, std::vector<float>(kChannels, 0.f),
               false, std::nullopt, act);
      ASSERT_GE(root.WithOpName("y").AddNode("_UnblockChannels",
                                             {root.OutputOf(*root.graph().FindNode("c"))},
                                             {{"T", DType::kF32}, {"channels", kChannels}}),
                0);
      std::vector<Tensor> out = Run(root, {"c", "y"});
      ASSERT_EQ(out.size(), 2u);
      EXPECT_FALSE(out[0].known_finite()) << act;
      results.push_back(out[1].ToVector<float>());
    }
    for (float& v : results[1]) v = (v > 0 || v != v) ? v : 0.f;  // ReLU keeping NaN
    int infinities = 0;
    for (size_t i = 0; i < results[0].size(); ++i) {
      const float got = results[0][i], want = results[1][i];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "k " << k << " at " << i << ": " << got;
      } else {
        EXPECT_EQ(got, want) << "k " << k << " at " << i;
      }
      infinities += std::isinf(got);
    }
    EXPECT_GT(infinities, 0) << "k " << k;
    // The centre pixel (all taps inside): +inf for positive weights, 0 for negative ones.
    for (int64_t o = 0; o < kChannels; o += 3) {
      EXPECT_EQ(results[0][o * 16 + 5], std::numeric_limits<float>::infinity()) << o;
      if (o + 2 < kChannels) {
        EXPECT_EQ(results[0][(o + 2) * 16 + 5], 0.f) << o + 2;
      }
    }
  }
}

}  // namespace
}  // namespace dflow
