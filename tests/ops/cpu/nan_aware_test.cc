// The NaN-aware loops of the CPU kernels (ops/cpu/nan_aware.h) against plain loops: the largest
// magnitude of an array (MaxAbs, the bound a convolution measures), NaN and infinities included,
// on one thread and split across an OpenMP team.
#include "ops/cpu/nan_aware.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace dflow::cpu {
namespace {

using testing::kInf;
using testing::kNaN;

// The reference: +inf when any value is NaN or infinite, else the largest |v|.
float MaxAbsLoop(const std::vector<float>& v) {
  float most = 0;
  for (float x : v) {
    if (!std::isfinite(x)) return kInf;
    most = std::max(most, std::fabs(x));
  }
  return most;
}

TEST(NanAwareTest, MaxAbsIsTheLargestMagnitude) {
  EXPECT_EQ(MaxAbs(nullptr, 0), 0.f);
  std::vector<float> v = testing::RandomFloats(1000, 3, -5, 5);
  EXPECT_EQ(MaxAbs(v.data(), static_cast<int64_t>(v.size())), MaxAbsLoop(v));
  // Negative values, -0, the smallest subnormal and the largest float.
  std::vector<float> edges = {-0.f, std::numeric_limits<float>::denorm_min(), -3.5f, 2.f};
  EXPECT_EQ(MaxAbs(edges.data(), 4), 3.5f);
  EXPECT_EQ(MaxAbs(edges.data(), 2), std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(MaxAbs(edges.data(), 1), 0.f);
  edges.push_back(-std::numeric_limits<float>::max());
  EXPECT_EQ(MaxAbs(edges.data(), 5), std::numeric_limits<float>::max());
}

TEST(NanAwareTest, MaxAbsOfANaNOrAnInfinityIsInfinity) {
  for (float bad : {kNaN, -kNaN, kInf, -kInf}) {
    for (size_t at : {size_t{0}, size_t{17}, size_t{999}}) {
      std::vector<float> v = testing::RandomFloats(1000, 5, -1, 1);
      v[at] = bad;
      EXPECT_EQ(MaxAbs(v.data(), 1000), kInf) << bad << " at " << at;
    }
  }
}

// Split across two threads: the same answer as one loop, wherever the largest value or the NaN
// lies (both halves, the last element).
TEST(NanAwareTest, MaxAbsParallelAgreesWithTheLoop) {
  const int64_t n = int64_t{1} << 20;
  std::vector<float> v = testing::RandomFloats(n, 7, -2, 2);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  for (int64_t at : {int64_t{3}, n / 2 + 5, n - 1}) {
    std::vector<float> w = v;
    w[at] = -9.f;
    EXPECT_EQ(MaxAbsParallel(w.data(), n), 9.f) << at;
    w[at] = kNaN;
    EXPECT_EQ(MaxAbsParallel(w.data(), n), kInf) << at;
  }
  EXPECT_EQ(MaxAbsParallel(v.data(), n), MaxAbsLoop(v));
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace dflow::cpu
