// The CPU MatMul, BatchMatMul and the three convolution passes in bf16 and f16 (oneDNN, f32
// accumulation), as the mixed-precision rewrite runs them. Products against a double-precision
// loop over the same rounded operands whose result is rounded once (the rounding here is the
// test's own, nearest even from the bits, not the Cast kernel's): shapes around oneDNN's blocks,
// transposes, a batch. Convolutions against the f64 convolution (a plain loop) of the operands
// rounded by Cast: strides, padding, dilation, groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/array_ops.h"
#include "ops/conv_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"
#include "test_util.h"

namespace dflow {
namespace {

// x rounded to `t` (bf16: 8 significant bits; f16: 11, range 6e-8 .. 65504), as a float.
float Round(DType t, float x) {
  if (t == DType::kBF16) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u += 0x7fff + ((u >> 16) & 1);
    u &= 0xffff0000u;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
  }
  // f16: scale to an integer number of units of the value's binade, round to even, scale back.
  if (x == 0) return x;
  int e;
  std::frexp(x, &e);                       // |x| in [2^(e-1), 2^e)
  const int unit = std::max(e - 11, -24);  // 11 significant bits, subnormals in units of 2^-24
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(double(x), -unit)), unit));
}

struct Case {
  int64_t batch, m, k, n;
  bool ta, tb;
};

// Runs Cast(a) x Cast(b) in `t` and returns it cast back to f32.
Result<std::vector<float>> RunHalf(DType t, const Case& c, const std::vector<float>& a,
                                   const std::vector<float>& b) {
  Scope root = Scope::NewRootScope();
  const bool batched = c.batch > 1;
  auto dims = [&](int64_t rows, int64_t cols, bool transposed) {
    Shape s = transposed ? Shape{cols, rows} : Shape{rows, cols};
    return batched ? Shape{c.batch, s.dim(0), s.dim(1)} : s;
  };
  Output pa = ops::Placeholder(root.WithOpName("a"), DType::kF32, dims(c.m, c.k, c.ta));
  Output pb = ops::Placeholder(root.WithOpName("b"), DType::kF32, dims(c.k, c.n, c.tb));
  ops::MatMulAttrs attrs{.transpose_a = c.ta, .transpose_b = c.tb};
  Output ha = ops::Cast(root, pa, t), hb = ops::Cast(root, pb, t);
  Output y = batched ? ops::BatchMatMul(root, ha, hb, attrs) : ops::MatMul(root, ha, hb, attrs);
  ops::Cast(root.WithOpName("y"), y, DType::kF32);
  RETURN_IF_ERROR(root.status());
  ASSIGN_OR_RETURN(auto session, Session::Create(root));
  ASSIGN_OR_RETURN(auto got, session->Run({{"a", Tensor::FromVector(a, dims(c.m, c.k, c.ta))},
                                           {"b", Tensor::FromVector(b, dims(c.k, c.n, c.tb))}},
                                          {"y"}));
  const float* p = got[0].data<float>();
  return std::vector<float>(p, p + got[0].num_elements());
}

void ExpectLikeLoop(DType t, const Case& c) {
  const int64_t per_a = c.m * c.k, per_b = c.k * c.n;
  std::vector<float> a = testing::RandomFloats(c.batch * per_a, 7, -2, 2);
  std::vector<float> b = testing::RandomFloats(c.batch * per_b, 8, -2, 2);
  auto got = RunHalf(t, c, a, b);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), static_cast<size_t>(c.batch * c.m * c.n));
  // One unit in the last place of the result's binade: the f32 sum and the double one may round
  // to neighbours.
  const double ulp = t == DType::kBF16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
  int checked = 0;
  for (int64_t q = 0; q < c.batch; ++q) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const float x = a[q * per_a + (c.ta ? p * c.m + i : i * c.k + p)];
          const float w = b[q * per_b + (c.tb ? j * c.k + p : p * c.n + j)];
          sum += double(Round(t, x)) * double(Round(t, w));
          magnitude += std::abs(double(Round(t, x)) * double(Round(t, w)));
        }
        const double want = Round(t, static_cast<float>(sum));
        const double g = (*got)[(q * c.m + i) * c.n + j];
        // Plus what an f32 sum of k terms may lose where they cancel.
        ASSERT_NEAR(g, want, ulp * std::abs(want) + 2 * c.k * std::ldexp(magnitude, -24) + 1e-30)
            << DTypeName(t) << " [" << q << "," << i << "," << j << "] of " << c.batch << "x" << c.m
            << "x" << c.k << "x" << c.n << (c.ta ? " ta" : "") << (c.tb ? " tb" : "");
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, c.batch * c.m * c.n);
}

const std::vector<Case> kCases = {{1, 1, 1, 1, false, false},    {1, 7, 13, 5, false, false},
                                  {1, 7, 13, 5, true, false},    {1, 4, 9, 3, false, true},
                                  {1, 64, 96, 48, true, true},   {1, 33, 257, 70, false, false},
                                  {3, 16, 40, 24, false, false}, {2, 9, 17, 31, true, true}};

TEST(HalfMatMulTest, Bf16LikeALoopOverRoundedOperands) {
  for (const Case& c : kCases) ExpectLikeLoop(DType::kBF16, c);
}

TEST(HalfMatMulTest, F16LikeALoopOverRoundedOperands) {
  for (const Case& c : kCases) ExpectLikeLoop(DType::kF16, c);
}

// An empty inner dimension gives zeros, and a bias or an activation (a fused f32 epilogue) is
// refused naming the op and the dtype rather than computed in the wrong precision.
TEST(HalfMatMulTest, EmptyInnerDimensionGivesZeros) {
  auto got = RunHalf(DType::kBF16, {1, 3, 0, 2, false, false}, {}, {});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, std::vector<float>(6, 0.f));
}

TEST(HalfMatMulTest, FusedEpilogueInHalfPrecisionIsRefused) {
  Scope root = Scope::NewRootScope();
  Output a = ops::Cast(root, ops::Const(root, std::vector<float>{1, 2}, Shape{1, 2}), DType::kBF16);
  Output b =
      ops::Cast(root, ops::Const(root, std::vector<float>{1, 2, 3, 4}, Shape{2, 2}), DType::kBF16);
  Output bias = ops::Cast(root, ops::Const(root, std::vector<float>{1, 1}, Shape{2}), DType::kBF16);
  Output y = root.OutputOf(root.WithOpName("fused").AddNode("_FusedMatMul", {a, b, bias}, {}));
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = (*session)->Run({}, {y.name()});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status().ToString();
  EXPECT_NE(out.status().message().find("_FusedMatMul"), std::string::npos)
      << out.status().ToString();
  EXPECT_NE(out.status().message().find("bf16"), std::string::npos) << out.status().ToString();
}

// Each pass of a convolution in `t` against the f64 convolution of the same rounded operands,
// rounded once; the tolerance adds what an f32 sum of the taps may lose, from the f64
// convolution of the operands' magnitudes.
void ExpectConvLikeF64(DType t, const Shape& xs, const Shape& ws, const ops::Conv2DAttrs& attrs) {
  Scope root = Scope::NewRootScope();
  auto rounded = [&](Output v, DType to) { return ops::Cast(root, ops::Cast(root, v, t), to); };
  Output x = ops::Const(root, testing::RandomFloats(xs.num_elements(), 3, -2, 2), xs);
  Output w = ops::Const(root, testing::RandomFloats(ws.num_elements(), 4, -2, 2), ws);
  // The forward output's shape gives dy's.
  Output y64 = ops::Conv2D(root, rounded(x, DType::kF64), rounded(w, DType::kF64), attrs);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto probe = Session::Create(root);
  ASSERT_TRUE(probe.ok());
  auto y_value = (*probe)->Run({}, {y64.name()});
  ASSERT_TRUE(y_value.ok()) << y_value.status().ToString();
  const Shape ys = y_value->at(0).shape();
  Output dy = ops::Const(root, testing::RandomFloats(ys.num_elements(), 5, -2, 2), ys);
  struct Pass {
    const char* name;
    Output half, exact, magnitude;
  };
  auto hx = ops::Cast(root, x, t), hw = ops::Cast(root, w, t), hdy = ops::Cast(root, dy, t);
  auto ex = rounded(x, DType::kF64), ew = rounded(w, DType::kF64), edy = rounded(dy, DType::kF64);
  auto ax = ops::Abs(root, ex), aw = ops::Abs(root, ew), ady = ops::Abs(root, edy);
  std::vector<Pass> passes = {
      {"forward", ops::Conv2D(root, hx, hw, attrs), ops::Conv2D(root, ex, ew, attrs),
       ops::Conv2D(root, ax, aw, attrs)},
      {"backward data", ops::Conv2DBackpropInput(root, hdy, hw, hx, attrs),
       ops::Conv2DBackpropInput(root, edy, ew, ex, attrs),
       ops::Conv2DBackpropInput(root, ady, aw, ax, attrs)},
      {"backward filter", ops::Conv2DBackpropFilter(root, hx, hdy, hw, attrs),
       ops::Conv2DBackpropFilter(root, ex, edy, ew, attrs),
       ops::Conv2DBackpropFilter(root, ax, ady, aw, attrs)}};
  std::vector<std::string> fetches;
  for (const Pass& p : passes) {
    fetches.push_back(ops::Cast(root, p.half, DType::kF32).name());
    fetches.push_back(ops::Cast(root, ops::Cast(root, p.exact, t), DType::kF64).name());
    fetches.push_back(p.magnitude.name());
  }
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = (*session)->Run({}, fetches);
  ASSERT_TRUE(out.ok()) << DTypeName(t) << ": " << out.status().ToString();
  const double ulp = t == DType::kBF16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
  // Terms per output: C/G * KH * KW forward, O/G * KH * KW backward data, N * OH * OW for the
  // filter's gradient; the largest of them.
  const int64_t kernel = ws.dim(2) * ws.dim(3);
  const int64_t taps = std::max(
      {ws.dim(1) * kernel, ws.dim(0) / attrs.groups * kernel, ys.dim(0) * ys.dim(2) * ys.dim(3)});
  for (size_t p = 0; p < passes.size(); ++p) {
    const Tensor& got = out->at(3 * p);
    const Tensor& want = out->at(3 * p + 1);
    const Tensor& mag = out->at(3 * p + 2);
    ASSERT_EQ(got.shape(), want.shape()) << passes[p].name;
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      const double g = got.data<float>()[i], e = want.data<double>()[i];
      ASSERT_NEAR(g, e, ulp * std::abs(e) + 2 * taps * std::ldexp(mag.data<double>()[i], -24))
          << DTypeName(t) << " " << passes[p].name << " [" << i << "] of " << xs << " * " << ws;
    }
  }
}

TEST(HalfConvTest, EveryPassLikeTheF64Convolution) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    ExpectConvLikeF64(t, Shape{2, 3, 9, 9}, Shape{8, 3, 3, 3}, {});
    ExpectConvLikeF64(t, Shape{1, 16, 12, 10}, Shape{16, 16, 3, 3},
                      {.strides = {2, 2}, .pads = {1, 1, 1, 1}});
    ExpectConvLikeF64(t, Shape{2, 4, 8, 8}, Shape{6, 2, 3, 3},
                      {.pads = {2, 1, 0, 1}, .dilations = {2, 1}, .groups = 2});
    ExpectConvLikeF64(t, Shape{1, 1, 28, 28}, Shape{32, 1, 5, 5}, {.pads = {2, 2, 2, 2}});
  }
}

}  // namespace
}  // namespace dflow
