// Forward results of the unary, comparison, Select, fill, AddN, Cast, softmax and cross-entropy
// kernels against plain loops in the test, and their run-time errors.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/gradients.h"
#include "ops/array_ops.h"
#include "ops/logic_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/unary_ops.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;
using testing::RandomFloats;
using testing::RunScope;

Tensor Floats(const std::vector<float>& v, const Shape& s) {
  return Tensor::FromVector<float>(v, s);
}

// f32 runs on oneDNN's eltwise primitive: within 1e-5 relative of double-precision math.
TEST(UnaryKernelTest, MatchesStdMath) {
  auto v = RandomFloats(40, 1, -3, 3);
  Tensor x = Floats(v, Shape{5, 8});
  Tensor pos = Floats(RandomFloats(40, 2, 0.1f, 4), Shape{5, 8});
  Scope root = Scope::NewRootScope();
  auto cx = ops::Const(root, x), cp = ops::Const(root, pos);
  std::vector<Output> outs = {ops::Neg(root, cx),     ops::Exp(root, cx),
                              ops::Log(root, cp),     ops::Sqrt(root, cp),
                              ops::Rsqrt(root, cp),   ops::Square(root, cx),
                              ops::Sigmoid(root, cx), ops::Tanh(root, cx),
                              ops::Gelu(root, cx),    ops::LeakyRelu(root, cx, 0.1),
                              ops::Relu(root, cx)};
  auto out = RunScope(root, {}, outs);
  ASSERT_EQ(out.size(), outs.size());
  for (int i = 0; i < 40; ++i) {
    double a = x.data<float>()[i], p = pos.data<float>()[i];
    std::vector<double> want = {-a,
                                std::exp(a),
                                std::log(p),
                                std::sqrt(p),
                                1 / std::sqrt(p),
                                a * a,
                                1 / (1 + std::exp(-a)),
                                std::tanh(a),
                                0.5 * a * (1 + std::erf(a / std::sqrt(2.0))),
                                a > 0 ? a : 0.1 * a,
                                a > 0 ? a : 0};
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_NEAR(out[k].data<float>()[i], want[k], 1e-5 * (1 + std::abs(want[k])))
          << outs[k].node().op() << " at " << i;
    }
  }
}

TEST(LogicKernelTest, ComparisonsAndSelectBroadcast) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Const(root, std::vector<int32_t>{1, 5, 3, 7, 2, 2}, Shape{2, 3});
  auto b = ops::Const(root, std::vector<int32_t>{2, 5, 1}, Shape{3});
  std::vector<Output> outs = {ops::Less(root, a, b),    ops::LessEqual(root, a, b),
                              ops::Greater(root, a, b), ops::GreaterEqual(root, a, b),
                              ops::Equal(root, a, b),   ops::NotEqual(root, a, b)};
  outs.push_back(ops::Select(root, outs[0], a, b));
  auto out = RunScope(root, {}, outs);
  ASSERT_EQ(out.size(), 7u);
  const int32_t av[] = {1, 5, 3, 7, 2, 2}, bv[] = {2, 5, 1};
  for (int i = 0; i < 6; ++i) {
    int32_t x = av[i], y = bv[i % 3];
    EXPECT_EQ(out[0].data<bool>()[i], x < y);
    EXPECT_EQ(out[1].data<bool>()[i], x <= y);
    EXPECT_EQ(out[2].data<bool>()[i], x > y);
    EXPECT_EQ(out[3].data<bool>()[i], x >= y);
    EXPECT_EQ(out[4].data<bool>()[i], x == y);
    EXPECT_EQ(out[5].data<bool>()[i], x != y);
    EXPECT_EQ(out[6].data<int32_t>()[i], x < y ? x : y);
  }
  EXPECT_EQ(out[0].dtype(), DType::kBool);
}

TEST(ArrayKernelTest, FillZerosOnesAddNCast) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, std::vector<float>{1.5f, -2.5f, 0, 3}, Shape{2, 2});
  auto fill = ops::Fill(root, Shape{3}, 7, DType::kI64);
  auto zeros = ops::ZerosLike(root, x);
  auto ones = ops::OnesLike(root, x);
  auto sum = ops::AddN(root, {x, ones, x});
  auto as_int = ops::Cast(root, x, DType::kI32);
  auto as_bool = ops::Cast(root, x, DType::kBool);
  auto out = RunScope(root, {}, {fill, zeros, ones, sum, as_int, as_bool});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0].ToVector<int64_t>(), std::vector<int64_t>({7, 7, 7}));
  EXPECT_EQ(out[1].ToVector<float>(), std::vector<float>({0, 0, 0, 0}));
  EXPECT_EQ(out[2].ToVector<float>(), std::vector<float>({1, 1, 1, 1}));
  EXPECT_EQ(out[3].ToVector<float>(), std::vector<float>({4, -4, 1, 7}));
  EXPECT_EQ(out[4].ToVector<int32_t>(), std::vector<int32_t>({1, -2, 0, 3}));
  EXPECT_EQ(out[5].ToVector<bool>(), std::vector<bool>({true, true, false, true}));
}

TEST(NnKernelTest, SoftmaxAndCrossEntropyMatchLoops) {
  const int n = 4, c = 6;
  auto v = RandomFloats(n * c, 5, -4, 4);
  std::vector<int32_t> labels = {0, 5, 2, 3};
  Scope root = Scope::NewRootScope();
  auto logits = ops::Const(root, Floats(v, Shape{n, c}));
  auto sm = ops::Softmax(root, logits);
  auto lsm = ops::LogSoftmax(root, logits);
  auto ce =
      ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, ops::Const(root, labels, Shape{n}));
  auto out = RunScope(root, {}, {sm, lsm, ce.loss, ce.backprop});
  ASSERT_EQ(out.size(), 4u);
  for (int r = 0; r < n; ++r) {
    double total = 0;
    for (int j = 0; j < c; ++j) total += std::exp(static_cast<double>(v[r * c + j]));
    for (int j = 0; j < c; ++j) {
      double p = std::exp(static_cast<double>(v[r * c + j])) / total;
      EXPECT_NEAR(out[0].data<float>()[r * c + j], p, 1e-6);
      EXPECT_NEAR(out[1].data<float>()[r * c + j], std::log(p), 1e-5);
      EXPECT_NEAR(out[3].data<float>()[r * c + j], p - (j == labels[r] ? 1 : 0), 1e-6);
    }
    double p_label = std::exp(static_cast<double>(v[r * c + labels[r]])) / total;
    EXPECT_NEAR(out[2].data<float>()[r], -std::log(p_label), 1e-5);
  }
}

TEST(NnKernelTest, LabelOutOfRangeNamesNodeRowAndLabel) {
  Scope root = Scope::NewRootScope();
  auto logits = ops::Placeholder(root.WithOpName("logits"), DType::kF32, Shape{-1, 3});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI64, Shape{-1});
  auto ce = ops::SparseSoftmaxCrossEntropyWithLogits(root.WithOpName("xent"), logits, labels);
  auto s = Session::Create(root);
  ASSERT_TRUE(s.ok());
  for (int64_t bad : {3, -1}) {
    auto out = (*s)->Run({{"logits", Tensor(DType::kF32, Shape{2, 3})},
                          {"labels", Tensor::FromVector<int64_t>({0, bad}, Shape{2})}},
                         {ce.loss.name()});
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageHas(out.status(),
                           {"node 'xent'", "label " + std::to_string(bad), "row 1", "[0, 3)"}));
  }
}

TEST(NnKernelTest, ShapeErrors) {
  Scope root = Scope::NewRootScope();
  ops::SparseSoftmaxCrossEntropyWithLogits(root.WithOpName("bad_rows"),
                                           ops::Placeholder(root, DType::kF32, Shape{4, 3}),
                                           ops::Placeholder(root, DType::kI32, Shape{5}));
  EXPECT_TRUE(MessageHas(root.status(), {"node 'bad_rows'", "4 rows", "5"}));
  Scope r2 = Scope::NewRootScope();
  ops::Softmax(r2.WithOpName("scalar_softmax"), ops::Const(r2, 1.0f));
  EXPECT_TRUE(MessageHas(r2.status(), {"node 'scalar_softmax'", "rank >= 1"}));
}

}  // namespace
}  // namespace dflow

namespace dflow {
namespace {

TEST(DropoutTest, DropsAtTheRateScalesAndReplays) {
  auto run = [](int steps) {
    Scope root = Scope::NewRootScope();
    auto x = ops::Fill(root, Shape{100000}, 2.0);
    auto d = ops::Dropout(root.WithOpName("drop"), x, 0.3, 42);
    auto s = Session::Create(root);
    EXPECT_TRUE(s.ok());
    std::vector<std::vector<float>> ys;
    for (int i = 0; i < steps; ++i) {
      auto out = (*s)->Run({}, {d.y.name(), d.mask.name()});
      EXPECT_TRUE(out.ok());
      ys.push_back(out->at(0).ToVector<float>());
      for (int64_t j = 0; j < 100000; ++j) {
        EXPECT_FLOAT_EQ(out->at(0).data<float>()[j], 2.0f * out->at(1).data<float>()[j]);
      }
    }
    return ys;
  };
  auto a = run(2), b = run(2);
  EXPECT_EQ(a, b);        // the same program replays the same masks
  EXPECT_NE(a[0], a[1]);  // each run draws a new mask
  int64_t dropped = 0;
  for (float v : a[0]) {
    if (v == 0) {
      ++dropped;
    } else {
      EXPECT_FLOAT_EQ(v, 2.0f / 0.7f);
    }
  }
  EXPECT_NEAR(dropped / 100000.0, 0.3, 0.01);
}

TEST(DropoutTest, GradientIsTheMaskAndBadRateNamesNode) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1000});
  auto d = ops::Dropout(root, x, 0.5, 1);
  auto g = Gradients(root, ops::ReduceSum(root, d.y), {x});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto out = testing::RunScope(root, {{"x", Tensor(DType::kF32, Shape{1000})}}, {d.mask, g->at(0)});
  ASSERT_EQ(out.size(), 2u);
  // One run computes both: the gradient is exactly that run's mask.
  EXPECT_TRUE(out[0].BitwiseEquals(out[1]));

  Scope r2 = Scope::NewRootScope();
  ops::Dropout(r2.WithOpName("too_much"), ops::Fill(r2, Shape{2}, 1), 1.0, 0);
  EXPECT_TRUE(testing::MessageHas(r2.status(), {"node 'too_much' (Dropout)", "[0, 1)"}));
}

}  // namespace
}  // namespace dflow
