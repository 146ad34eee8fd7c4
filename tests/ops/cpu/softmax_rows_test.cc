// The attention's masked softmax (ops/cpu/softmax_rows.h) against a double-precision loop: rows
// of every length around the vector widths, masks along the row and one value per row, sums
// near the exp cut-off, and rows with NaN or infinities, which must come out as the unfused
// Add and Softmax give them.
#include "ops/cpu/softmax_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace dflow::cpu {
namespace {

using testing::kInf;
using testing::kNaN;

// softmax(x + add) over the last axis in double, the addend indexed as MaskedSoftmaxRows
// broadcasts it; NaN where the row holds a NaN or +inf, or is all -inf.
std::vector<float> Reference(const std::vector<float>& x, const std::vector<float>& add,
                             const std::vector<int64_t>& add_dims, const Shape& y) {
  const int r = y.rank();
  const int64_t c = y[r - 1], rows = y.num_elements() / c;
  std::vector<float> out(x.size());
  for (int64_t row = 0; row < rows; ++row) {
    std::vector<double> s(c);
    for (int64_t j = 0; j < c; ++j) {
      int64_t rest = row * c + j, at = 0, step = 1;
      for (int i = r - 1; i >= 0; --i) {
        const int64_t idx = rest % y[i];
        rest /= y[i];
        at += (add_dims[i] == 1 ? 0 : idx) * step;
        step *= add_dims[i];
      }
      s[j] = static_cast<double>(static_cast<float>(x[row * c + j] + add[at]));
    }
    double top = -INFINITY;
    bool nan = false;
    for (double v : s) {
      nan = nan || std::isnan(v) || v == INFINITY;
      top = std::max(top, v);
    }
    nan = nan || top == -INFINITY;
    double total = 0;
    for (double v : s) total += std::exp(v - top);
    for (int64_t j = 0; j < c; ++j) {
      out[row * c + j] = nan ? kNaN : static_cast<float>(std::exp(s[j] - top) / total);
    }
  }
  return out;
}

void ExpectProbabilitiesNear(const std::vector<float>& got, const std::vector<float>& want,
                             int64_t c) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "row " << i / c << " column " << i % c;
    } else {
      // Within 2e-6 of each probability, or 1e-9 absolute (the terms far below the row's
      // maximum, whose float argument x - max already carries that much).
      EXPECT_NEAR(got[i], want[i], 2e-6 * want[i] + 1e-9) << "row " << i / c << " column " << i % c;
    }
  }
}

TEST(MaskedSoftmaxRowsTest, MatchesADoubleLoopAtEveryRowLength) {
  for (int64_t c : {1, 2, 7, 8, 15, 16, 17, 33, 128, 257}) {
    const Shape y{2, 3, 4, c};
    std::vector<float> x = testing::RandomFloats(y.num_elements(), 7 + c, -20, 20);
    // A padding mask along the row, one per batch: the last third of each row masked out.
    std::vector<float> mask(2 * c, 0.f);
    for (int64_t j = 2 * c / 3; j < c; ++j) mask[j] = mask[c + j] = -10000.f;
    std::vector<float> want = Reference(x, mask, {2, 1, 1, c}, y);
    MaskedSoftmaxRows(mask.data(), {2, 1, 1, c}, y, x.data());
    ExpectProbabilitiesNear(x, want, c);
  }
}

TEST(MaskedSoftmaxRowsTest, AddsOneValuePerRowAndCutsOffBelowExpRange) {
  const Shape y{3, 40};
  std::vector<float> x = testing::RandomFloats(120, 3, -1, 1);
  x[5] = -86.9f;  // just inside the exp range below the row maximum
  x[6] = -87.5f;  // just outside: counts as 0 (the reference gives 1e-38 of the row)
  x[45] = 80.f;   // a row whose maximum is far above the rest
  std::vector<float> add = {0.5f, -3.f, 1e6f};  // one value per row, the last large
  std::vector<float> want = Reference(x, add, {3, 1}, y);
  MaskedSoftmaxRows(add.data(), {3, 1}, y, x.data());
  ExpectProbabilitiesNear(x, want, 40);
  EXPECT_EQ(x[6], 0.f);
}

TEST(MaskedSoftmaxRowsTest, RowsWithNaNOrInfinitiesComeOutAsTheUnfusedOps) {
  const Shape y{5, 20};
  std::vector<float> x = testing::RandomFloats(100, 5, -3, 3), add(20, 0.f);
  x[3] = kNaN;                                     // row 0: NaN throughout
  x[25] = kInf;                                    // row 1: +inf, NaN throughout
  x[47] = -kInf;                                   // row 2: one term 0
  for (int64_t j = 60; j < 80; ++j) x[j] = -kInf;  // row 3: all -inf, NaN
  add[19] = -kInf;                                 // every row's last term masked
  std::vector<float> want = Reference(x, add, {1, 20}, y);
  MaskedSoftmaxRows(add.data(), {1, 20}, y, x.data());
  ExpectProbabilitiesNear(x, want, 20);
  EXPECT_EQ(x[47], 0.f);
  EXPECT_EQ(x[99], 0.f);
  EXPECT_TRUE(std::isnan(x[3]) && std::isnan(x[21]) && std::isnan(x[70]));
}

}  // namespace
}  // namespace dflow::cpu
