// The CPU convolution's NaN handling across a chain of convolutions (ops/cpu/conv_kernels.cc): a
// convolution that clipped finite inputs vouches for its output (Tensor::known_finite), the
// next one trusts it instead of checking, and nothing that changes a value keeps the mark.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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
  Output d = ClippedConv(root, "depthwise", e, true, 5);
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
    in.set_known_finite(marked);
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
  in.set_known_finite(true);
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

}  // namespace
}  // namespace dflow
