// Every differentiable op: the gradient built by Gradients() against central finite differences,
// in double precision, on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "graph/gradients.h"
#include "ops/array_ops.h"
#include "ops/batch_norm_ops.h"
#include "ops/conv_ops.h"
#include "ops/logic_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/unary_ops.h"
#include "test_util.h"

namespace dflow {
namespace {

using Fn = std::function<Output(const Scope&, const std::vector<Output>&)>;

// Random doubles in [lo, hi) whose magnitude is at least `min_abs` (away from kinks at 0).
Tensor Random(const Shape& s, uint32_t seed, double lo = -2, double hi = 2, double min_abs = 0.1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(s.num_elements());
  for (auto& x : v) {
    do {
      x = dist(gen);
    } while (std::abs(x) < min_abs);
  }
  return Tensor::FromVector<double>(v, s);
}

// Checks d loss / d input for loss = sum(W * f(inputs)) with random weights W.
void CheckGradient(const std::string& what, const Fn& f, const std::vector<Tensor>& inputs,
                   double tol = 1e-6) {
  SCOPED_TRACE(what);
  // Forward once to learn the output's shape.
  Shape out_shape;
  {
    Scope probe = Scope::NewRootScope();
    std::vector<Output> ps;
    for (const auto& t : inputs) ps.push_back(ops::Const(probe, t));
    Output y = f(probe, ps);
    ASSERT_TRUE(probe.ok()) << probe.status().ToString();
    auto out = testing::RunScope(probe, {}, {y});
    ASSERT_EQ(out.size(), 1u);
    out_shape = out[0].shape();
  }
  Scope root = Scope::NewRootScope();
  std::vector<Output> ps;
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    names.push_back("in" + std::to_string(i));
    ps.push_back(ops::Placeholder(root.WithOpName(names.back()), DType::kF64, inputs[i].shape()));
  }
  Output y = f(root, ps);
  Output w = ops::Const(root, Random(out_shape, 99, -1, 1, 0));
  Output loss = ops::ReduceSum(root.WithOpName("loss"), ops::Mul(root, y, w));
  auto grads = Gradients(root, loss, ps);
  ASSERT_TRUE(grads.ok()) << grads.status().ToString();
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();

  std::vector<Tensor> values;
  for (const auto& t : inputs) values.push_back(t.Clone());
  auto feeds = [&] {
    Session::Feeds fd;
    for (size_t i = 0; i < values.size(); ++i) fd.push_back({names[i], values[i]});
    return fd;
  };
  std::vector<std::string> fetches;
  for (const auto& g : *grads) fetches.push_back(g.name());
  auto analytic = (*session)->Run(feeds(), fetches);
  ASSERT_TRUE(analytic.ok()) << analytic.status().ToString();
  auto loss_at = [&]() {
    auto out = (*session)->Run(feeds(), {"loss"});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? out->at(0).data<double>()[0] : 0.0;
  };
  const double eps = 1e-6;
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(analytic->at(i).shape(), values[i].shape()) << "input " << i;
    for (int64_t j = 0; j < values[i].num_elements(); ++j) {
      double* x = values[i].data<double>() + j;
      double saved = *x;
      *x = saved + eps;
      double up = loss_at();
      *x = saved - eps;
      double down = loss_at();
      *x = saved;
      double numeric = (up - down) / (2 * eps);
      double got = analytic->at(i).data<double>()[j];
      ASSERT_NEAR(got, numeric, tol * std::max({1.0, std::abs(got), std::abs(numeric)}))
          << "input " << i << " element " << j;
    }
  }
}

Fn Binary(Output (*op)(const Scope&, Output, Output)) {
  return [op](const Scope& s, const std::vector<Output>& in) { return op(s, in[0], in[1]); };
}
Fn Unary(Output (*op)(const Scope&, Output)) {
  return [op](const Scope& s, const std::vector<Output>& in) { return op(s, in[0]); };
}

TEST(GradientCheckTest, BinaryOpsWithBroadcasting) {
  struct Case {
    Shape a, b;
  };
  std::vector<Case> cases = {{Shape{3, 4}, Shape{3, 4}},
                             {Shape{3, 4}, Shape{4}},
                             {Shape{2, 1, 3}, Shape{4, 1}},
                             {Shape{}, Shape{2, 3}}};
  uint32_t seed = 1;
  for (const auto& c : cases) {
    for (auto [name, op] :
         std::vector<std::pair<const char*, Output (*)(const Scope&, Output, Output)>>{
             {"Add", ops::Add},
             {"Sub", ops::Sub},
             {"Mul", ops::Mul},
             {"Div", ops::Div},
             {"Maximum", ops::Maximum},
             {"Minimum", ops::Minimum}}) {
      CheckGradient(std::string(name) + " " + c.a.ToString() + " " + c.b.ToString(), Binary(op),
                    {Random(c.a, seed), Random(c.b, seed + 1)});
      seed += 2;
    }
    CheckGradient("Pow " + c.a.ToString(), Binary(ops::Pow),
                  {Random(c.a, seed, 0.5, 2), Random(c.b, seed + 1, -1.5, 1.5)});
  }
}

TEST(GradientCheckTest, UnaryOps) {
  Shape s{3, 5};
  CheckGradient("Neg", Unary(ops::Neg), {Random(s, 1)});
  CheckGradient("Exp", Unary(ops::Exp), {Random(s, 2)});
  CheckGradient("Log", Unary(ops::Log), {Random(s, 3, 0.2, 3)});
  CheckGradient("Sqrt", Unary(ops::Sqrt), {Random(s, 4, 0.2, 3)});
  CheckGradient("Rsqrt", Unary(ops::Rsqrt), {Random(s, 5, 0.2, 3)});
  CheckGradient("Square", Unary(ops::Square), {Random(s, 6)});
  CheckGradient("Sigmoid", Unary(ops::Sigmoid), {Random(s, 7)});
  CheckGradient("Tanh", Unary(ops::Tanh), {Random(s, 8)});
  CheckGradient("Relu", Unary(ops::Relu), {Random(s, 9)});
  CheckGradient("Gelu", Unary(ops::Gelu), {Random(s, 10)});
  CheckGradient("Identity", Unary(ops::Identity), {Random(s, 11)});
  CheckGradient(
      "LeakyRelu",
      [](const Scope& sc, const std::vector<Output>& in) { return ops::LeakyRelu(sc, in[0], 0.1); },
      {Random(s, 12)});
  CheckGradient("Softmax", Unary(ops::Softmax), {Random(s, 13)});
  CheckGradient("LogSoftmax", Unary(ops::LogSoftmax), {Random(s, 14)});
  // Piecewise constant: zero gradient, checked between the steps (Round's are at the halves).
  CheckGradient("Floor", Unary(ops::Floor), {Random(s, 15, 0.2, 0.8)});
  CheckGradient("Ceil", Unary(ops::Ceil), {Random(s, 16, 0.2, 0.8)});
  CheckGradient("Round", Unary(ops::Round), {Random(s, 17, -0.4, 0.4)});
  CheckGradient("Sign", Unary(ops::Sign), {Random(s, 18)});
}

TEST(GradientCheckTest, MatMulAllTransposes) {
  uint32_t seed = 20;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Shape sa = ta ? Shape{4, 3} : Shape{3, 4};
      Shape sb = tb ? Shape{5, 4} : Shape{4, 5};
      CheckGradient("MatMul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
                    [ta, tb](const Scope& s, const std::vector<Output>& in) {
                      return ops::MatMul(s, in[0], in[1], {.transpose_a = ta, .transpose_b = tb});
                    },
                    {Random(sa, seed), Random(sb, seed + 1)});
      seed += 2;
    }
  }
}

TEST(GradientCheckTest, BatchMatMulAllTransposes) {
  uint32_t seed = 90;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Shape sa = ta ? Shape{2, 4, 3} : Shape{2, 3, 4};
      Shape sb = tb ? Shape{2, 5, 4} : Shape{2, 4, 5};
      CheckGradient("BatchMatMul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
                    [ta, tb](const Scope& s, const std::vector<Output>& in) {
                      return ops::BatchMatMul(s, in[0], in[1],
                                              {.transpose_a = ta, .transpose_b = tb});
                    },
                    {Random(sa, seed), Random(sb, seed + 1)});
      seed += 2;
    }
  }
}

TEST(GradientCheckTest, BiasAddReductionsReshapeAddNSelect) {
  CheckGradient("BiasAdd", Binary(ops::BiasAdd), {Random(Shape{4, 3}, 30), Random(Shape{3}, 31)});
  for (bool keep : {false, true}) {
    for (std::vector<int64_t> axes : {std::vector<int64_t>{}, {1}, {0, 2}, {-1}}) {
      CheckGradient("ReduceSum",
                    [axes, keep](const Scope& s, const std::vector<Output>& in) {
                      return ops::ReduceSum(s, in[0], axes, {.keep_dims = keep});
                    },
                    {Random(Shape{2, 3, 4}, 32)});
      CheckGradient("ReduceMean",
                    [axes, keep](const Scope& s, const std::vector<Output>& in) {
                      return ops::ReduceMean(s, in[0], axes, {.keep_dims = keep});
                    },
                    {Random(Shape{2, 3, 4}, 33)});
    }
  }
  CheckGradient("Reshape",
                [](const Scope& s, const std::vector<Output>& in) {
                  return ops::Square(s, ops::Reshape(s, in[0], {3, -1}));
                },
                {Random(Shape{2, 6}, 34)});
  CheckGradient("AddN",
                [](const Scope& s, const std::vector<Output>& in) {
                  return ops::AddN(s, {in[0], in[1], in[0]});
                },
                {Random(Shape{2, 3}, 35), Random(Shape{2, 3}, 36)});
  CheckGradient("Select",
                [](const Scope& s, const std::vector<Output>& in) {
                  return ops::Select(s, ops::Greater(s, in[0], in[1]), ops::Square(s, in[0]),
                                     ops::Mul(s, in[0], in[1]));
                },
                {Random(Shape{3, 4}, 37), Random(Shape{3, 4}, 38)});
}

TEST(GradientCheckTest, ConvolutionAndPooling) {
  struct Case {
    Shape x, w;
    ops::Conv2DAttrs a;
  };
  std::vector<Case> cases = {
      {Shape{2, 2, 5, 4}, Shape{3, 2, 3, 3}, {.pads = {1, 1, 1, 1}}},
      {Shape{1, 4, 6, 6},
       Shape{4, 2, 2, 3},
       {.strides = {2, 1}, .pads = {0, 1, 1, 0}, .dilations = {1, 2}, .groups = 2}},
  };
  uint32_t seed = 60;
  for (const auto& c : cases) {
    CheckGradient("Conv2D " + c.x.ToString(),
                  [a = c.a](const Scope& s, const std::vector<Output>& in) {
                    return ops::Conv2D(s, in[0], in[1], a);
                  },
                  {Random(c.x, seed), Random(c.w, seed + 1)});
    seed += 2;
  }
  ops::PoolAttrs pa{.ksize = {3, 2}, .strides = {2, 1}, .pads = {1, 0, 1, 1}};
  // Distinct values keep each window's maximum unique, so the max is differentiable.
  CheckGradient(
      "MaxPool",
      [pa](const Scope& s, const std::vector<Output>& in) { return ops::MaxPool(s, in[0], pa); },
      {Random(Shape{2, 2, 5, 4}, 70)});
  // Pooling of a ReLU: the session's rewrite runs these through _MaxPoolWithArgmax and the
  // masked _MaxPoolGradWithArgmax (rewrite/fusion.h), overlapping windows and padding included.
  CheckGradient("MaxPool of Relu",
                [pa](const Scope& s, const std::vector<Output>& in) {
                  return ops::MaxPool(s, ops::Relu(s, in[0]), pa);
                },
                {Random(Shape{2, 2, 5, 4}, 73)});
  CheckGradient("MaxPool of Square",
                [pa](const Scope& s, const std::vector<Output>& in) {
                  return ops::MaxPool(s, ops::Square(s, in[0]), pa);
                },
                {Random(Shape{2, 2, 5, 4}, 74)});
  CheckGradient(
      "AvgPool",
      [pa](const Scope& s, const std::vector<Output>& in) { return ops::AvgPool(s, in[0], pa); },
      {Random(Shape{2, 2, 5, 4}, 71)});
  CheckGradient("GlobalAvgPool and Flatten",
                [](const Scope& s, const std::vector<Output>& in) {
                  return ops::Flatten(s, ops::GlobalAvgPool(s, in[0]));
                },
                {Random(Shape{2, 3, 4, 5}, 72)});
}

TEST(GradientCheckTest, BatchNormTrainingAndInference) {
  uint32_t seed = 80;
  for (const Shape& x : {Shape{3, 2, 3, 2}, Shape{5, 3}, Shape{2, 2, 4}}) {
    int64_t c = x[1];
    CheckGradient("BatchNorm " + x.ToString(),
                  [](const Scope& s, const std::vector<Output>& in) {
                    return ops::BatchNorm(s, in[0], in[1], in[2], {.epsilon = 1e-3}).y;
                  },
                  {Random(x, seed), Random(Shape{c}, seed + 1), Random(Shape{c}, seed + 2)});
    // Variances are positive.
    CheckGradient("BatchNormInference " + x.ToString(),
                  [](const Scope& s, const std::vector<Output>& in) {
                    return ops::BatchNormInference(s, in[0], in[1], in[2], in[3], in[4]);
                  },
                  {Random(x, seed + 3), Random(Shape{c}, seed + 4), Random(Shape{c}, seed + 5),
                   Random(Shape{c}, seed + 6), Random(Shape{c}, seed + 7, 0.5, 2)});
    seed += 8;
  }
}

TEST(GradientCheckTest, RearrangingOpsAndReduceMax) {
  CheckGradient("Transpose",
                [](const Scope& s, const std::vector<Output>& in) {
                  return ops::Transpose(s, in[0], {2, 0, 1});
                },
                {Random(Shape{2, 3, 4}, 80)});
  CheckGradient("Concat",
                [](const Scope& s, const std::vector<Output>& in) {
                  return ops::Concat(s, {in[0], in[1], in[0]}, 1);
                },
                {Random(Shape{2, 3}, 81), Random(Shape{2, 2}, 82)});
  // Pieces used twice, once, and not at all (its gradient is zeros).
  CheckGradient("Split",
                [](const Scope& s, const std::vector<Output>& in) {
                  auto p = ops::SplitV(s, in[0], {1, -1, 2}, 1);
                  return ops::Concat(s, {ops::Mul(s, p[0], p[0]), p[1]}, 1);
                },
                {Random(Shape{2, 6}, 87)});
  CheckGradient("Slice",
                [](const Scope& s, const std::vector<Output>& in) {
                  return ops::Slice(s, in[0], {1, 0, 2}, {2, -1, 1});
                },
                {Random(Shape{3, 2, 4}, 83)});
  CheckGradient("Pad",
                [](const Scope& s, const std::vector<Output>& in) {
                  return ops::Pad(s, in[0], {1, 2, 0, 1}, 0.5);
                },
                {Random(Shape{2, 3}, 84)});
  CheckGradient("CheckNumerics",
                [](const Scope& s, const std::vector<Output>& in) {
                  return ops::CheckNumerics(s, in[0], "check");
                },
                {Random(Shape{5}, 85)});
  for (std::vector<int64_t> axes : {std::vector<int64_t>{}, {1}, {0, 2}}) {
    CheckGradient("ReduceMax",
                  [axes](const Scope& s, const std::vector<Output>& in) {
                    return ops::ReduceMax(s, in[0], axes);
                  },
                  {Random(Shape{2, 3, 4}, 86)});
  }
}

TEST(GradientCheckTest, SparseSoftmaxCrossEntropy) {
  Tensor labels = Tensor::FromVector<int32_t>({2, 0, 4, 1}, Shape{4});
  CheckGradient(
      "SparseSoftmaxCrossEntropyWithLogits",
      [labels](const Scope& s, const std::vector<Output>& in) {
        return ops::SparseSoftmaxCrossEntropyWithLogits(s, in[0], ops::Const(s, labels)).loss;
      },
      {Random(Shape{4, 5}, 40)});
}

TEST(GradientCheckTest, MlpThroughManyOps) {
  // x -> MatMul -> BiasAdd -> Tanh -> MatMul -> cross entropy: gradients for x, W1, b1, W2.
  Tensor labels = Tensor::FromVector<int64_t>({1, 0, 2}, Shape{3});
  CheckGradient(
      "mlp",
      [labels](const Scope& s, const std::vector<Output>& in) {
        Output h = ops::Tanh(s, ops::BiasAdd(s, ops::MatMul(s, in[0], in[1]), in[2]));
        Output logits = ops::MatMul(s, h, in[3]);
        return ops::ReduceMean(
            s, ops::SparseSoftmaxCrossEntropyWithLogits(s, logits, ops::Const(s, labels)).loss);
      },
      {Random(Shape{3, 4}, 50), Random(Shape{4, 6}, 51), Random(Shape{6}, 52),
       Random(Shape{6, 3}, 53)});
}

}  // namespace
}  // namespace dflow
