// One row times a constant matrix (ops/cpu/gemv.h) against a double-precision loop: widths around
// the panel's, W stored either way round, with and without a bias, NaN and infinities carried
// as the plain sums carry them; and through the CPU MatMul, which takes this path for one row
// of a product with a Const.
#include "ops/cpu/gemv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "test_util.h"

namespace dflow::cpu {
namespace {

using testing::RandomFloats;

using testing::kInf;
using testing::kNaN;

// x W + bias in double; W [k, n], or [n, k] when transposed.
std::vector<float> Reference(const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>* bias, int64_t k, int64_t n,
                             bool transposed) {
  std::vector<float> y(n);
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t p = 0; p < k; ++p) {
      s += static_cast<double>(x[p]) * (transposed ? w[j * k + p] : w[p * n + j]);
    }
    y[j] = static_cast<float>(s + (bias != nullptr ? (*bias)[j] : 0.0));
  }
  return y;
}

void ExpectColumnsNear(const std::vector<float>& got, const std::vector<float>& want, int64_t k) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < got.size(); ++j) {
    if (std::isnan(want[j])) {
      EXPECT_TRUE(std::isnan(got[j])) << "column " << j << " got " << got[j];
    } else if (std::isinf(want[j])) {
      EXPECT_EQ(got[j], want[j]) << "column " << j;
    } else {
      EXPECT_NEAR(got[j], want[j], 2e-6 * k) << "column " << j << " of " << got.size();
    }
  }
}

TEST(GemvTest, EveryWidthAroundThePanelAndBothLayoutsMatchADoubleLoop) {
  for (int64_t n : {1, 15, 127, 128, 129, 300, 1000}) {
    for (int64_t k : {1, 7, 64, 517}) {
      for (bool transposed : {false, true}) {
        for (bool with_bias : {false, true}) {
          const auto x = RandomFloats(k, 1 + k, -1, 1);
          const auto w = RandomFloats(k * n, 2 + n, -1, 1);
          const auto bias = RandomFloats(n, 3, -2, 2);
          Tensor wt = Tensor::FromVector(w, transposed ? Shape{n, k} : Shape{k, n});
          GemvWeights packed;
          auto panels = packed.Get(wt, k, n, transposed);
          ASSERT_TRUE(panels.ok()) << panels.status().ToString();
          EXPECT_EQ(panels->shape(), (Shape{(n + kGemvPanel - 1) / kGemvPanel, k, kGemvPanel}));
          std::vector<float> y(n, kNaN);
          Gemv(x.data(), panels->data<float>(), with_bias ? bias.data() : nullptr, y.data(), k, n);
          SCOPED_TRACE(::testing::Message() << "k " << k << " n " << n << " transposed "
                                            << transposed << " bias " << with_bias);
          ExpectColumnsNear(y, Reference(x, w, with_bias ? &bias : nullptr, k, n, transposed), k);
        }
      }
    }
  }
}

// A NaN or an infinity in x reaches every column; one in W only its own column (two opposite
// infinities there may give NaN), as in the plain sums.
TEST(GemvTest, NaNAndInfinitiesLandWhereThePlainSumsPutThem) {
  const int64_t k = 300, n = 260;
  const auto w0 = RandomFloats(k * n, 5, -1, 1);
  for (int bad = 0; bad < 4; ++bad) {
    auto x = RandomFloats(k, 6, -1, 1);
    auto w = w0;
    if (bad == 0) x[17] = kNaN;
    if (bad == 1) w[40 * n + 200] = kInf;
    if (bad == 2) {
      w[3 * n + 129] = kInf;
      w[4 * n + 129] = -kInf;
    }
    if (bad == 3) x[0] = kInf;
    Tensor wt = Tensor::FromVector(w, Shape{k, n});
    GemvWeights packed;
    auto panels = packed.Get(wt, k, n, false);
    ASSERT_TRUE(panels.ok()) << panels.status().ToString();
    std::vector<float> y(n);
    Gemv(x.data(), panels->data<float>(), nullptr, y.data(), k, n);
    SCOPED_TRACE(bad);
    ExpectColumnsNear(y, Reference(x, w, nullptr, k, n, false), k);
  }
}

// The panels are made again when another tensor comes (a kernel that sees new weights).
TEST(GemvTest, OtherWeightsArePackedAgain) {
  const int64_t k = 200, n = 150;
  const auto x = RandomFloats(k, 7, -1, 1);
  GemvWeights packed;
  for (uint32_t seed : {8, 9}) {
    const auto w = RandomFloats(k * n, seed, -1, 1);
    Tensor wt = Tensor::FromVector(w, Shape{k, n});
    auto panels = packed.Get(wt, k, n, false);
    ASSERT_TRUE(panels.ok()) << panels.status().ToString();
    std::vector<float> y(n);
    Gemv(x.data(), panels->data<float>(), nullptr, y.data(), k, n);
    ExpectColumnsNear(y, Reference(x, w, nullptr, k, n, false), k);
  }
}

// The CPU MatMul of one row by a Const large enough for the panels (and of two rows, which
// oneDNN computes), with b stored either way round, as the double loop gives them.
TEST(GemvTest, AMatMulOfOneRowByAConstMatchesADoubleLoop) {
  const int64_t k = 640, n = 500;
  ASSERT_TRUE(GemvPays(k, n));
  for (int64_t rows : {1, 2}) {
    for (bool transposed : {false, true}) {
      Scope root = Scope::NewRootScope();
      auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{rows, k});
      const auto w = RandomFloats(k * n, 10, -1, 1);
      Output c = ops::Const(root, Tensor::FromVector(w, transposed ? Shape{n, k} : Shape{k, n}));
      Output y = ops::MatMul(root.WithOpName("y"), x, c, {.transpose_b = transposed});
      const auto xv = RandomFloats(rows * k, 11, -1, 1);
      auto out = testing::RunScope(root, {{"x", Tensor::FromVector(xv, Shape{rows, k})}}, {y});
      ASSERT_EQ(out.size(), 1u);
      const float* got = out[0].data<float>();
      for (int64_t r = 0; r < rows; ++r) {
        SCOPED_TRACE(::testing::Message()
                     << "row " << r << " of " << rows << " transposed " << transposed);
        std::vector<float> row(xv.begin() + r * k, xv.begin() + (r + 1) * k);
        ExpectColumnsNear(std::vector<float>(got + r * n, got + (r + 1) * n),
                          Reference(row, w, nullptr, k, n, transposed), k);
      }
    }
  }
}

}  // namespace
}  // namespace dflow::cpu
