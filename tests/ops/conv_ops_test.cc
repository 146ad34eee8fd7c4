// Conv2D and pooling: shapes and errors, f32 (oneDNN) forward against a loop written here, the
// f64 gradients against finite differences (gradient_check_test.cc covers the harness), and the
// f32 oneDNN backward passes against the checked f64 path.
#include "ops/conv_ops.h"

#include <gtest/gtest.h>

#include <cmath>

#include "graph/gradients.h"
#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "runtime/local_session.h"
#include "test_util.h"

namespace dflow {
namespace {
using testing::MessageHas;
using testing::RandomFloats;

struct ConvCase {
  Shape x, w;
  ops::Conv2DAttrs a;
};

const std::vector<ConvCase> kConvCases = {
    {Shape{2, 3, 7, 6}, Shape{4, 3, 3, 3}, {}},
    {Shape{1, 2, 8, 8}, Shape{3, 2, 3, 3}, {.strides = {2, 2}, .pads = {1, 1, 1, 1}}},
    {Shape{2, 4, 9, 7},
     Shape{6, 2, 3, 2},
     {.strides = {1, 2}, .pads = {2, 0, 1, 1}, .dilations = {2, 1}, .groups = 2}},
    {Shape{1, 1, 5, 5}, Shape{2, 1, 1, 1}, {}},
};

// A convolution written directly from its definition.
std::vector<double> ReferenceConv(const std::vector<float>& x, const Shape& xs,
                                  const std::vector<float>& w, const Shape& ws,
                                  const ops::Conv2DAttrs& a, Shape* ys) {
  int64_t g = a.groups, n = xs[0], c = xs[1], h = xs[2], wd = xs[3], o = ws[0], kh = ws[2],
          kw = ws[3];
  int64_t oh = (h + a.pads[0] + a.pads[2] - ((kh - 1) * a.dilations[0] + 1)) / a.strides[0] + 1;
  int64_t ow = (wd + a.pads[1] + a.pads[3] - ((kw - 1) * a.dilations[1] + 1)) / a.strides[1] + 1;
  *ys = Shape{n, o, oh, ow};
  std::vector<double> y(n * o * oh * ow, 0.0);
  int64_t cg = c / g, og = o / g;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t q = 0; q < ow; ++q) {
          double acc = 0;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t row = r * a.strides[0] - a.pads[0] + i * a.dilations[0];
                int64_t col = q * a.strides[1] - a.pads[1] + j * a.dilations[1];
                if (row < 0 || row >= h || col < 0 || col >= wd) continue;
                int64_t ch = (oc / og) * cg + ic;
                acc += double(x[((b * c + ch) * h + row) * wd + col]) *
                       w[((oc * cg + ic) * kh + i) * kw + j];
              }
          y[((b * o + oc) * oh + r) * ow + q] = acc;
        }
  return y;
}

TEST(ConvTest, F32ForwardMatchesDefinition) {
  uint32_t seed = 1;
  for (const auto& c : kConvCases) {
    auto xv = RandomFloats(c.x.num_elements(), seed++),
         wv = RandomFloats(c.w.num_elements(), seed++);
    Scope root = Scope::NewRootScope();
    auto y = ops::Conv2D(root, ops::Const(root, xv, c.x), ops::Const(root, wv, c.w), c.a);
    Shape want_shape;
    auto want = ReferenceConv(xv, c.x, wv, c.w, c.a, &want_shape);
    EXPECT_EQ(y.shape(), want_shape);
    auto out = testing::RunScope(root, {}, {y});
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].shape(), want_shape);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(out[0].data<float>()[i], want[i], 1e-4 * (1 + std::abs(want[i])))
          << c.x << " " << i;
    }
  }
}

// One session, one graph, inputs of five shapes in turn (more than a kernel keeps primitives
// for, and back to earlier ones): every run computes its own shape's convolution, with its
// bias and ReLU, as the definition gives it.
TEST(ConvTest, RunsOfChangingShapesEachGetTheirOwnConvolution) {
  const Shape ws{8, 3, 3, 3};
  const ops::Conv2DAttrs a{.strides = {1, 1}, .pads = {1, 1, 1, 1}};
  auto wv = RandomFloats(ws.num_elements(), 7), bv = RandomFloats(8, 8);
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 3, -1, -1});
  auto conv = ops::Conv2D(root, x, ops::Const(root, wv, ws), a);
  ops::Relu(root.WithOpName("y"), ops::Add(root, conv, ops::Const(root, bv, Shape{1, 8, 1, 1})));
  auto session = LocalSession::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  const std::vector<Shape> shapes = {Shape{1, 3, 8, 8}, Shape{2, 3, 5, 7}, Shape{1, 3, 8, 8},
                                     Shape{3, 3, 6, 6}, Shape{1, 3, 9, 4}, Shape{2, 3, 5, 7},
                                     Shape{1, 3, 8, 8}};
  uint32_t seed = 20;
  for (const Shape& xs : shapes) {
    auto xv = RandomFloats(xs.num_elements(), seed++);
    auto out = (*session)->Run({{"x", Tensor::FromVector(xv, xs)}}, {"y"});
    ASSERT_TRUE(out.ok()) << xs << ": " << out.status().ToString();
    Shape want_shape;
    auto want = ReferenceConv(xv, xs, wv, ws, a, &want_shape);
    ASSERT_EQ((*out)[0].shape(), want_shape) << xs;
    const int64_t plane = want_shape[2] * want_shape[3];
    for (size_t i = 0; i < want.size(); ++i) {
      const double v = std::max(0.0, want[i] + bv[(i / plane) % 8]);
      ASSERT_NEAR((*out)[0].data<float>()[i], v, 1e-4 * (1 + std::abs(v))) << xs << " " << i;
    }
  }
}

// loss = sum(W * conv(x, w)); returns d loss / d x and d w in the given dtype.
std::vector<Tensor> ConvGrads(const ConvCase& c, DType dtype, uint32_t seed) {
  auto xv = RandomFloats(c.x.num_elements(), seed), wv = RandomFloats(c.w.num_elements(), seed + 1);
  Scope root = Scope::NewRootScope();
  auto x = ops::Cast(root, ops::Const(root, xv, c.x), dtype);
  auto w = ops::Cast(root, ops::Const(root, wv, c.w), dtype);
  auto y = ops::Conv2D(root, x, w, c.a);
  auto weights = ops::Cast(
      root, ops::Const(root, RandomFloats(y.shape().num_elements(), seed + 2), y.shape()), dtype);
  auto loss = ops::ReduceSum(root, ops::Mul(root, y, weights));
  auto g = Gradients(root, loss, {x, w});
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok()) return {};
  return testing::RunScope(
      root, {}, {ops::Cast(root, g->at(0), DType::kF64), ops::Cast(root, g->at(1), DType::kF64)});
}

TEST(ConvTest, F32BackwardMatchesCheckedF64Path) {
  uint32_t seed = 10;
  for (const auto& c : kConvCases) {
    auto f32 = ConvGrads(c, DType::kF32, seed);
    auto f64 = ConvGrads(c, DType::kF64, seed);
    seed += 3;
    ASSERT_EQ(f32.size(), 2u);
    ASSERT_EQ(f64.size(), 2u);
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(f32[k].shape(), f64[k].shape());
      for (int64_t i = 0; i < f32[k].num_elements(); ++i) {
        double want = f64[k].data<double>()[i];
        ASSERT_NEAR(f32[k].data<double>()[i], want, 1e-4 * (1 + std::abs(want)))
            << (k ? "dw" : "dx") << " " << c.x << " at " << i;
      }
    }
  }
}

TEST(PoolTest, ForwardMatchesDefinition) {
  auto xv = RandomFloats(2 * 3 * 7 * 6, 3);
  Shape xs{2, 3, 7, 6};
  ops::PoolAttrs a{.ksize = {3, 2}, .strides = {2, 2}, .pads = {1, 0, 1, 1}};
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, xv, xs);
  auto mx = ops::MaxPool(root, x, a);
  auto av = ops::AvgPool(root, x, a);
  auto gap = ops::GlobalAvgPool(root, x);
  EXPECT_EQ(mx.shape(), Shape({2, 3, 4, 3}));
  EXPECT_EQ(gap.shape(), Shape({2, 3, 1, 1}));
  auto out = testing::RunScope(root, {}, {mx, av, gap});
  ASSERT_EQ(out.size(), 3u);
  for (int64_t p = 0; p < 6; ++p)
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t q = 0; q < 3; ++q) {
        double best = -1e30, sum = 0;
        int count = 0;
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 2; ++j) {
            int64_t row = r * 2 - 1 + i, col = q * 2 + j;
            if (row < 0 || row >= 7 || col < 0 || col >= 6) continue;
            double v = xv[(p * 7 + row) * 6 + col];
            best = std::max(best, v);
            sum += v;
            ++count;
          }
        int64_t yi = (p * 4 + r) * 3 + q;
        EXPECT_FLOAT_EQ(out[0].data<float>()[yi], best);
        EXPECT_NEAR(out[1].data<float>()[yi], sum / count, 1e-6);
      }
  for (int64_t p = 0; p < 6; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < 42; ++i) sum += xv[p * 42 + i];
    EXPECT_NEAR(out[2].data<float>()[p], sum / 42, 1e-6);
  }
}

TEST(ConvTest, ShapeErrorsNameTheNode) {
  Scope root = Scope::NewRootScope();
  ops::Conv2D(root.WithOpName("c1"), ops::Placeholder(root, DType::kF32, Shape{1, 3, 8, 8}),
              ops::Placeholder(root, DType::kF32, Shape{4, 2, 3, 3}));
  EXPECT_TRUE(MessageHas(root.status(), {"node 'c1' (Conv2D)", "3 channels"}));
  Scope r2 = Scope::NewRootScope();
  ops::Conv2D(r2.WithOpName("c2"), ops::Placeholder(r2, DType::kF32, Shape{1, 3, 8, 8}),
              ops::Placeholder(r2, DType::kF32, Shape{4, 3, 3, 3}), {.strides = {0, 1}});
  EXPECT_TRUE(MessageHas(r2.status(), {"node 'c2'", "'strides'"}));
  // Sizes a file could declare that overflow 64 bits are errors, not wrapped numbers.
  Scope big = Scope::NewRootScope();
  ops::Conv2D(big.WithOpName("c3"), ops::Placeholder(big, DType::kF32, Shape{1, 3, 8, 8}),
              ops::Placeholder(big, DType::kF32, Shape{4, 3, 3, 3}),
              {.pads = {int64_t{1} << 62, 0, int64_t{1} << 62, 0}});
  EXPECT_TRUE(MessageHas(big.status(), {"node 'c3'", "overflows"})) << big.status().ToString();
  Scope r3 = Scope::NewRootScope();
  ops::MaxPool(r3.WithOpName("p"), ops::Placeholder(r3, DType::kF32, Shape{1, 3, 8}));
  EXPECT_TRUE(MessageHas(r3.status(), {"node 'p' (MaxPool)", "rank 4"}));
  Scope r4 = Scope::NewRootScope();
  ops::Flatten(r4, ops::Placeholder(r4.WithOpName("unknown"), DType::kF32, Shape{-1, -1, 2}));
  EXPECT_TRUE(MessageHas(r4.status(), {"Flatten", "'unknown:0'"}));
}

}  // namespace
}  // namespace dflow
