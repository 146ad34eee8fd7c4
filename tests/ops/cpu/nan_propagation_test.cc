// NaN and infinities through every CPU op that compares, reduces or normalises, against PyTorch
// 1.13's results (Debian's python3-torch; the script that printed them is in the comment of
// each table). Issue 31: Relu(NaN) gave 0, so a NaN from a bad input vanished in the middle of a
// network instead of reaching the loss. NaN propagates as in TensorFlow and PyTorch; a value
// PyTorch gives as NaN must be NaN here, an infinity the same infinity, a finite value within
// 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/array_ops.h"
#include "ops/conv_ops.h"
#include "ops/logic_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/unary_ops.h"
#include "runtime/session.h"
#include "test_util.h"

namespace dflow {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// x and y of the element-wise tables:
//   x = torch.tensor([nan, inf, -inf, -1.5, 0.0, 2.5])
//   y = torch.tensor([1.0, nan, inf, -inf, nan, -2.0])
const std::vector<double> kX = {kNaN, kInf, -kInf, -1.5, 0.0, 2.5};
const std::vector<double> kY = {1.0, kNaN, kInf, -kInf, kNaN, -2.0};

void ExpectLike(const std::string& what, const std::vector<double>& got,
                const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << "[" << i << "] = " << got[i] << ", PyTorch: nan";
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << "[" << i << "]";
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-6 * std::max(1.0, std::fabs(want[i])))
          << what << "[" << i << "]";
    }
  }
}

template <typename T>
Tensor Of(const std::vector<double>& values, const Shape& shape) {
  std::vector<T> v(values.begin(), values.end());
  return Tensor::FromVector<T>(v, shape);
}

std::vector<double> Values(const Tensor& t) {
  std::vector<double> out;
  switch (t.dtype()) {
    case DType::kF32:
      for (float v : t.ToVector<float>()) out.push_back(v);
      break;
    case DType::kF64:
      for (double v : t.ToVector<double>()) out.push_back(v);
      break;
    case DType::kBool:
      for (bool v : t.ToVector<bool>()) out.push_back(v ? 1 : 0);
      break;
    case DType::kI64:
      for (int64_t v : t.ToVector<int64_t>()) out.push_back(static_cast<double>(v));
      break;
    case DType::kI32:
      for (int32_t v : t.ToVector<int32_t>()) out.push_back(v);
      break;
    default:
      ADD_FAILURE() << "dtype " << DTypeName(t.dtype());
  }
  return out;
}

using UnaryOp = Output (*)(const Scope&, Output);
using BinaryOp = Output (*)(const Scope&, Output, Output);

// Runs f on x (fed), for f32 and f64.
template <typename Build>
void CheckUnary(const std::string& op, Build build, const std::vector<double>& want) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    Scope root = Scope::NewRootScope();
    auto x = ops::Placeholder(root.WithOpName("x"), dtype, Shape{6});
    auto y = build(root, x);
    Tensor in = dtype == DType::kF32 ? Of<float>(kX, Shape{6}) : Of<double>(kX, Shape{6});
    auto out = testing::RunScope(root, {{"x", in}}, {y});
    ASSERT_EQ(out.size(), 1u) << op;
    ExpectLike(op + " " + std::string(DTypeName(dtype)), Values(out[0]), want);
  }
}

TEST(NanPropagationTest, UnaryOps) {
  // torch.relu(x), F.leaky_relu(x, 0.2), F.gelu(x), torch.sigmoid, torch.tanh, torch.exp,
  // torch.log, torch.sqrt, torch.rsqrt, torch.square, -x
  CheckUnary("Relu", ops::Relu, {kNaN, kInf, 0.0, 0.0, 0.0, 2.5});
  CheckUnary("LeakyRelu", [](const Scope& s, Output x) { return ops::LeakyRelu(s, x, 0.2); },
             {kNaN, kInf, -kInf, -0.30000001192092896, 0.0, 2.5});
  CheckUnary("Gelu", ops::Gelu, {kNaN, kInf, kNaN, -0.10021086037158966, 0.0, 2.48447585105896});
  CheckUnary("Sigmoid", ops::Sigmoid,
             {kNaN, 1.0, 0.0, 0.18242552876472473, 0.5, 0.9241418242454529});
  CheckUnary("Tanh", ops::Tanh, {kNaN, 1.0, -1.0, -0.9051482677459717, 0.0, 0.9866142868995667});
  CheckUnary("Exp", ops::Exp, {kNaN, kInf, 0.0, 0.22313016653060913, 1.0, 12.182494163513184});
  CheckUnary("Log", ops::Log, {kNaN, kInf, kNaN, kNaN, -kInf, 0.9162907600402832});
  CheckUnary("Sqrt", ops::Sqrt, {kNaN, kInf, kNaN, kNaN, 0.0, 1.5811388492584229});
  CheckUnary("Rsqrt", ops::Rsqrt, {kNaN, 0.0, kNaN, kNaN, kInf, 0.6324555277824402});
  CheckUnary("Square", ops::Square, {kNaN, kInf, kInf, 2.25, 0.0, 6.25});
  CheckUnary("Neg", ops::Neg, {kNaN, -kInf, kInf, 1.5, -0.0, -2.5});
}

TEST(NanPropagationTest, BinaryOps) {
  // torch.maximum(x, y), torch.minimum, x + y, x - y, x * y, x / y, torch.pow(x, y), and the
  // comparisons (1 for True).
  struct Case {
    const char* op;
    BinaryOp build;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {"Maximum", ops::Maximum, {kNaN, kNaN, kInf, -1.5, kNaN, 2.5}},
      {"Minimum", ops::Minimum, {kNaN, kNaN, -kInf, -kInf, kNaN, -2.0}},
      {"Add", ops::Add, {kNaN, kNaN, kNaN, -kInf, kNaN, 0.5}},
      {"Sub", ops::Sub, {kNaN, kNaN, -kInf, kInf, kNaN, 4.5}},
      {"Mul", ops::Mul, {kNaN, kNaN, -kInf, kInf, kNaN, -5.0}},
      {"Div", ops::Div, {kNaN, kNaN, kNaN, 0.0, kNaN, -1.25}},
      {"Pow", ops::Pow, {kNaN, kNaN, kInf, 0.0, kNaN, 0.1599999964237213}},
      {"Equal", ops::Equal, {0, 0, 0, 0, 0, 0}},
      {"NotEqual", ops::NotEqual, {1, 1, 1, 1, 1, 1}},
      {"Less", ops::Less, {0, 0, 1, 0, 0, 0}},
      {"Greater", ops::Greater, {0, 0, 0, 1, 0, 1}},
      {"LessEqual", ops::LessEqual, {0, 0, 1, 0, 0, 0}},
      {"GreaterEqual", ops::GreaterEqual, {0, 0, 0, 1, 0, 1}},
  };
  for (const Case& c : cases) {
    for (DType dtype : {DType::kF32, DType::kF64}) {
      Scope root = Scope::NewRootScope();
      auto x = ops::Placeholder(root.WithOpName("x"), dtype, Shape{6});
      auto y = ops::Placeholder(root.WithOpName("y"), dtype, Shape{6});
      auto z = c.build(root, x, y);
      auto f = [&](const std::vector<double>& v) {
        return dtype == DType::kF32 ? Of<float>(v, Shape{6}) : Of<double>(v, Shape{6});
      };
      auto out = testing::RunScope(root, {{"x", f(kX)}, {"y", f(kY)}}, {z});
      ASSERT_EQ(out.size(), 1u) << c.op;
      ExpectLike(std::string(c.op) + " " + std::string(DTypeName(dtype)), Values(out[0]), c.want);
    }
  }
}

// m = torch.tensor([[1.0, nan, 3.0], [inf, -1.0, 2.0], [-inf, -inf, 0.0], [1.0, 2.0, 3.0]])
const std::vector<double> kM = {1.0, kNaN, 3.0, kInf, -1.0, 2.0, -kInf, -kInf, 0.0, 1, 2, 3};

TEST(NanPropagationTest, ReductionsAndNormalisations) {
  Scope root = Scope::NewRootScope();
  auto m = ops::Placeholder(root.WithOpName("m"), DType::kF32, Shape{4, 3});
  std::vector<Output> outs = {
      ops::ReduceMax(root, m, {1}),   // torch.amax(m, 1)
      ops::ReduceSum(root, m, {1}),   // m.sum(1)
      ops::ReduceMean(root, m, {1}),  // m.mean(1)
      ops::ArgMax(root, m, 1),        // torch.argmax(m, 1)
      ops::Softmax(root, m),          // torch.softmax(m, 1)
      ops::LogSoftmax(root, m),       // torch.log_softmax(m, 1)
  };
  auto out = testing::RunScope(root, {{"m", Of<float>(kM, Shape{4, 3})}}, outs);
  ASSERT_EQ(out.size(), outs.size());
  ExpectLike("ReduceMax", Values(out[0]), {kNaN, kInf, 0.0, 3.0});
  ExpectLike("ReduceSum", Values(out[1]), {kNaN, kInf, -kInf, 6.0});
  ExpectLike("ReduceMean", Values(out[2]), {kNaN, kInf, -kInf, 2.0});
  ExpectLike("ArgMax", Values(out[3]), {1, 0, 2, 2});
  ExpectLike("Softmax", Values(out[4]),
             {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, 0.0, 0.0, 1.0, 0.09003057330846786,
              0.2447284758090973, 0.6652409434318542});
  ExpectLike("LogSoftmax", Values(out[5]),
             {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, -kInf, -kInf, 0.0, -2.4076058864593506,
              -1.4076058864593506, -0.40760594606399536});
}

TEST(NanPropagationTest, Pooling) {
  // p = torch.tensor([[[[1, nan, 3, 4], [5, 6, 7, 8], [-inf, -inf, 1, 2], [3, 4, inf, 0]]]]);
  // F.max_pool2d(p, 2, 2), F.avg_pool2d(p, 2, 2)
  const std::vector<double> p = {1, kNaN, 3, 4, 5, 6, 7, 8, -kInf, -kInf, 1, 2, 3, 4, kInf, 0};
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("p"), DType::kF32, Shape{1, 1, 4, 4});
  auto out = testing::RunScope(root, {{"p", Of<float>(p, Shape{1, 1, 4, 4})}},
                               {ops::MaxPool(root, x), ops::AvgPool(root, x)});
  ASSERT_EQ(out.size(), 2u);
  ExpectLike("MaxPool", Values(out[0]), {kNaN, 8.0, 4.0, kInf});
  ExpectLike("AvgPool", Values(out[1]), {kNaN, 5.5, -kInf, kInf});
}

// The case the issue found: a NaN in a layer's input or bias reaches the output through
// MatMul + BiasAdd + Relu, which the fusion pass runs as one oneDNN primitive with a ReLU
// post-op. torch.relu(x @ w + b) with x = [[nan, 1], [1, 1]], w = I, b = [0, 0] and with
// x = [[1, 1], [1, 1]], b = [nan, 0].
TEST(NanPropagationTest, MatMulBiasAddReluKeepsTheNaN) {
  for (bool nan_in_bias : {false, true}) {
    Scope root = Scope::NewRootScope();
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{2, 2});
    auto b = ops::Placeholder(root.WithOpName("b"), DType::kF32, Shape{2});
    auto w = ops::Const(root, std::vector<float>{1, 0, 0, 1}, Shape{2, 2});
    auto y = ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, x, w), b));
    Tensor xs = nan_in_bias ? Of<float>({1, 1, 1, 1}, Shape{2, 2})
                            : Of<float>({kNaN, 1, 1, 1}, Shape{2, 2});
    Tensor bs = nan_in_bias ? Of<float>({kNaN, 0}, Shape{2}) : Of<float>({0, 0}, Shape{2});
    auto out = testing::RunScope(root, {{"x", xs}, {"b", bs}}, {y});
    ASSERT_EQ(out.size(), 1u);
    if (nan_in_bias) {
      ExpectLike("bias NaN", Values(out[0]), {kNaN, 1, kNaN, 1});
    } else {
      ExpectLike("input NaN", Values(out[0]), {kNaN, kNaN, 1, 1});
    }
  }
}

// The same through Conv2D + a channel bias (Add of [C, 1, 1]) + Relu, fused into one oneDNN
// convolution:
// F.relu(F.conv2d(x, torch.ones(1, 1, 2, 2), torch.tensor([0.5]))) with
// x = [[[[1, nan, 2], [-3, -4, 1], [0.5, -1, -2]]]].
TEST(NanPropagationTest, Conv2DAddReluKeepsTheNaN) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{1, 1, 3, 3});
  auto w = ops::Const(root, std::vector<float>{1, 1, 1, 1}, Shape{1, 1, 2, 2});
  auto b = ops::Const(root, std::vector<float>{0.5f}, Shape{1, 1, 1});
  auto y = ops::Relu(root, ops::Add(root, ops::Conv2D(root, x, w), b));
  auto out = testing::RunScope(
      root, {{"x", Of<float>({1, kNaN, 2, -3, -4, 1, 0.5, -1, -2}, Shape{1, 1, 3, 3})}}, {y});
  ASSERT_EQ(out.size(), 1u);
  ExpectLike("Conv2D+Add+Relu", Values(out[0]), {kNaN, kNaN, 0.0, 0.0});
}

// torch.amax(torch.tensor([[-inf, -inf]]), 1) is -inf (it was the lowest finite float here).
TEST(NanPropagationTest, ReduceMaxOfInfinitiesBelowZero) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    Scope root = Scope::NewRootScope();
    auto m = ops::Placeholder(root.WithOpName("m"), dtype, Shape{1, 2});
    Tensor in = dtype == DType::kF32 ? Of<float>({-kInf, -kInf}, Shape{1, 2})
                                     : Of<double>({-kInf, -kInf}, Shape{1, 2});
    auto out = testing::RunScope(root, {{"m", in}}, {ops::ReduceMax(root, m, {1})});
    ASSERT_EQ(out.size(), 1u);
    ExpectLike("ReduceMax", Values(out[0]), {-kInf});
  }
}

}  // namespace
}  // namespace dflow
