// BatchNorm, BatchNormInference and BatchNormGrad: shapes, the f32 (oneDNN) and f64 (loop)
// kernels against plain loops written here, running statistics, and every error a user can hit.
// Gradients against finite differences live in gradient_check_test.cc.
#include "ops/batch_norm_ops.h"

#include <gtest/gtest.h>

#include <cmath>

#include "graph/gradients.h"
#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "test_util.h"

namespace dflow {
namespace {

using testing::MessageHas;
using testing::RandomFloats;
using testing::RunScope;

// x [n, c, inner] as flat data; the reference statistics and outputs in double.
struct Ref {
  int64_t n, c, inner;
  std::vector<double> mean, var;

  Ref(const std::vector<float>& x, int64_t n_, int64_t c_, int64_t inner_)
      : n(n_), c(c_), inner(inner_), mean(c_), var(c_) {
    for (int64_t ch = 0; ch < c; ++ch) {
      double s = 0, sq = 0;
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < inner; ++i) s += x[(b * c + ch) * inner + i];
      mean[ch] = s / (n * inner);
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t i = 0; i < inner; ++i) {
          double d = x[(b * c + ch) * inner + i] - mean[ch];
          sq += d * d;
        }
      }
      var[ch] = sq / (n * inner);
    }
  }
  int64_t ch(int64_t j) const { return (j / inner) % c; }
};

TEST(BatchNormTest, ShapesAndBuildErrors) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DType::kF32, Shape{-1, 4, 5, 5});
  auto v4 = ops::Placeholder(root, DType::kF32, Shape{4});
  auto bn = ops::BatchNorm(root, x, v4, v4);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_EQ(bn.y.shape(), (Shape{-1, 4, 5, 5}));
  EXPECT_EQ(bn.mean.shape(), (Shape{4}));
  EXPECT_EQ(bn.variance.shape(), (Shape{4}));

  Scope bad = Scope::NewRootScope();
  auto bx = ops::Placeholder(bad, DType::kF32, Shape{2, 4, 3});
  auto v3 = ops::Placeholder(bad, DType::kF32, Shape{3});
  ops::BatchNorm(bad.WithOpName("bn"), bx, v3, v3);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(bad.status(), {"'bn'", "3 elements", "4 channels"}));

  Scope rank = Scope::NewRootScope();
  auto scalarish = ops::Placeholder(rank, DType::kF32, Shape{6});
  ops::BatchNormInference(rank.WithOpName("bni"), scalarish, scalarish, scalarish, scalarish,
                          scalarish);
  EXPECT_TRUE(MessageHas(rank.status(), {"'bni'", "rank 2 to 5"}));
}

// Training-mode forward on oneDNN (f32) for ranks 2, 3 and 4.
TEST(BatchNormTest, TrainingForwardMatchesLoop) {
  struct Case {
    Shape shape;
    int64_t n, c, inner;
  };
  for (const Case& k : {Case{Shape{8, 3, 5, 4}, 8, 3, 20}, Case{Shape{16, 7}, 16, 7, 1},
                        Case{Shape{2, 5, 9}, 2, 5, 9}}) {
    SCOPED_TRACE(k.shape.ToString());
    auto xv = RandomFloats(k.shape.num_elements(), 1, -3, 5);
    auto sv = RandomFloats(k.c, 2), ov = RandomFloats(k.c, 3);
    Scope root = Scope::NewRootScope();
    auto bn = ops::BatchNorm(root, ops::Const(root, xv, k.shape), ops::Const(root, sv, Shape{k.c}),
                             ops::Const(root, ov, Shape{k.c}), {.epsilon = 1e-3});
    auto out = RunScope(root, {}, {bn.y, bn.mean, bn.variance});
    ASSERT_EQ(out.size(), 3u);
    Ref ref(xv, k.n, k.c, k.inner);
    for (int64_t c = 0; c < k.c; ++c) {
      EXPECT_NEAR(out[1].data<float>()[c], ref.mean[c], 1e-5);
      EXPECT_NEAR(out[2].data<float>()[c], ref.var[c], 1e-4);
    }
    for (int64_t j = 0; j < k.shape.num_elements(); ++j) {
      int64_t c = ref.ch(j);
      double want = (xv[j] - ref.mean[c]) / std::sqrt(ref.var[c] + 1e-3) * sv[c] + ov[c];
      ASSERT_NEAR(out[0].data<float>()[j], want, 1e-4) << j;
    }
  }
}

TEST(BatchNormTest, InferenceMatchesLoopInF32AndF64) {
  Shape shape{4, 3, 2, 5};
  auto xv = RandomFloats(shape.num_elements(), 4, -2, 2);
  auto sv = RandomFloats(3, 5), ov = RandomFloats(3, 6), mv = RandomFloats(3, 7);
  auto vv = RandomFloats(3, 8, 0.2f, 3.f);
  for (DType t : {DType::kF32, DType::kF64}) {
    Scope root = Scope::NewRootScope();
    auto c = [&](const std::vector<float>& v, const Shape& s) {
      return ops::Cast(root, ops::Const(root, v, s), t);
    };
    auto y = ops::BatchNormInference(root, c(xv, shape), c(sv, {3}), c(ov, {3}), c(mv, {3}),
                                     c(vv, {3}), {.epsilon = 0.01});
    auto out = RunScope(root, {}, {ops::Cast(root, y, DType::kF64)});
    ASSERT_EQ(out.size(), 1u);
    for (int64_t j = 0; j < shape.num_elements(); ++j) {
      int64_t ch = (j / 10) % 3;
      double want = (xv[j] - mv[ch]) / std::sqrt(vv[ch] + 0.01) * sv[ch] + ov[ch];
      ASSERT_NEAR(out[0].data<double>()[j], want, 1e-5) << DTypeName(t) << " " << j;
    }
  }
}

// BatchNormGrad on oneDNN (f32) and on loops (f64) against the closed form computed here.
TEST(BatchNormTest, GradMatchesClosedFormInF32AndF64) {
  Shape shape{6, 4, 3, 3};
  int64_t n = 6, c = 4, inner = 9;
  auto xv = RandomFloats(shape.num_elements(), 9, -2, 3);
  auto dyv = RandomFloats(shape.num_elements(), 10);
  auto sv = RandomFloats(c, 11);
  Ref ref(xv, n, c, inner);
  const double eps = 1e-5;
  std::vector<double> dscale(c), doffset(c), dx(shape.num_elements());
  for (int64_t j = 0; j < shape.num_elements(); ++j) {
    int64_t ch = ref.ch(j);
    doffset[ch] += dyv[j];
    dscale[ch] += dyv[j] * (xv[j] - ref.mean[ch]) / std::sqrt(ref.var[ch] + eps);
  }
  const double m = n * inner;
  for (int64_t j = 0; j < shape.num_elements(); ++j) {
    int64_t ch = ref.ch(j);
    double inv = 1 / std::sqrt(ref.var[ch] + eps), xhat = (xv[j] - ref.mean[ch]) * inv;
    dx[j] = sv[ch] * inv / m * (m * dyv[j] - doffset[ch] - xhat * dscale[ch]);
  }
  for (DType t : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(DTypeName(t));
    Scope root = Scope::NewRootScope();
    auto cst = [&](const std::vector<float>& v, const Shape& s) {
      return ops::Cast(root, ops::Const(root, v, s), t);
    };
    Output x = cst(xv, shape);
    auto bn = ops::BatchNorm(root, x, cst(sv, {c}), cst(std::vector<float>(c, 0), {c}));
    auto g = ops::BatchNormGrad(root, cst(dyv, shape), x, cst(sv, {c}), bn.mean, bn.variance);
    auto out = RunScope(root, {},
                        {ops::Cast(root, g.dx, DType::kF64), ops::Cast(root, g.dscale, DType::kF64),
                         ops::Cast(root, g.doffset, DType::kF64)});
    ASSERT_EQ(out.size(), 3u);
    for (int64_t ch = 0; ch < c; ++ch) {
      EXPECT_NEAR(out[1].data<double>()[ch], dscale[ch], 1e-3);
      EXPECT_NEAR(out[2].data<double>()[ch], doffset[ch], 1e-3);
    }
    for (int64_t j = 0; j < shape.num_elements(); ++j) {
      ASSERT_NEAR(out[0].data<double>()[j], dx[j], 1e-4) << j;
    }
  }
}

TEST(BatchNormTest, RunningStatisticsFollowPyTorchConvention) {
  Scope root = Scope::NewRootScope();
  Shape shape{5, 2, 2, 2};
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 2, 2, 2});
  auto scale = ops::Const(root, std::vector<float>{1, 1}, Shape{2});
  auto offset = ops::Const(root, std::vector<float>{0, 0}, Shape{2});
  auto rm = ops::InitializedVariable(root.WithOpName("rm"), Shape{2}, ops::Initializer::Zeros());
  auto rv =
      ops::InitializedVariable(root.WithOpName("rv"), Shape{2}, ops::Initializer::Constant(1));
  auto bn = ops::BatchNorm(root, x, scale, offset);
  auto updates = ops::UpdateRunningStats(root, bn, x, rm.var, rv.var, 0.25);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  ASSERT_EQ(updates.size(), 2u);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Run({}, {}, {rm.init.node_name(), rv.init.node_name()}).ok());
  double mean[2] = {0, 0}, var[2] = {1, 1};
  for (int step = 0; step < 3; ++step) {
    auto xv = RandomFloats(shape.num_elements(), 20 + step, -1, 4);
    Ref ref(xv, 5, 2, 4);
    auto out = (*session)->Run({{"x", Tensor::FromVector(xv, shape)}},
                               {updates[0].name(), updates[1].name()});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    for (int c = 0; c < 2; ++c) {
      mean[c] = 0.75 * mean[c] + 0.25 * ref.mean[c];
      var[c] = 0.75 * var[c] + 0.25 * ref.var[c] * 20 / 19;  // unbiased over 20 elements
      EXPECT_NEAR(out->at(0).data<float>()[c], mean[c], 1e-5);
      EXPECT_NEAR(out->at(1).data<float>()[c], var[c], 1e-4);
    }
  }
}

TEST(BatchNormTest, RunTimeErrorsNameTheNode) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32);
  auto s = ops::Placeholder(root.WithOpName("s"), DType::kF32);
  auto bn = ops::BatchNorm(root.WithOpName("bn"), x, s, s);
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok());
  auto wrong = (*session)->Run({{"x", Tensor::FromVector(RandomFloats(12, 1), Shape{2, 3, 2})},
                                {"s", Tensor::FromVector(RandomFloats(2, 2), Shape{2})}},
                               {bn.y.name()});
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(wrong.status(), {"'bn'", "scale", "3 channels"}));
  auto empty = (*session)->Run({{"x", Tensor::FromVector(std::vector<float>{}, Shape{0, 2})},
                                {"s", Tensor::FromVector(RandomFloats(2, 2), Shape{2})}},
                               {bn.y.name()});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(empty.status(), {"'bn'", "no elements per channel"}));
}

TEST(BatchNormTest, GradientThroughBatchStatisticsIsRefused) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DType::kF32, Shape{4, 2});
  auto s = ops::Const(root, std::vector<float>{1, 1}, Shape{2});
  auto bn = ops::BatchNorm(root.WithOpName("bn"), x, s, s);
  auto grads = Gradients(root, ops::ReduceSum(root, bn.mean), {x});
  ASSERT_FALSE(grads.ok());
  EXPECT_EQ(grads.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(grads.status(), {"'bn'", "mean or variance"}));
}

}  // namespace
}  // namespace dflow
