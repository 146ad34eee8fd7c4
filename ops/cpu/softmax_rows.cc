#include "ops/cpu/softmax_rows.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>

#include "ops/cpu/broadcast_add.h"
#include "ops/cpu/nan_aware.h"
#include "ops/cpu/parallel.h"

namespace dflow::cpu {
namespace {

// e^x for finite x <= 0, 0 below -87 (where e^x is under 1.7e-38): x = n ln 2 + r with
// |r| <= ln 2 / 2 (ln 2 split in two so n ln 2 is subtracted exactly), e^r as 1 + r + r^2 p(r)
// with Cephes' degree-5 p, times 2^n built in the exponent bits. Branch-free, so the loop
// calling it vectorises (the clamp as a select: std::max there kept GCC from it).
inline float ExpNonPositive(float x) {
  const bool under = x < -87.f;
  x = under ? -87.f : x;
  // Round to nearest for x <= 0 through a truncating conversion.
  const int32_t n = -static_cast<int32_t>(0.5f - x * 1.44269504089f);
  const float fn = static_cast<float>(n);
  const float r = (x - fn * 0.693359375f) - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
  return under ? 0.f : p * scale;
}

// One row of c sums already in x: false (x untouched) when one is NaN or infinite, else x =
// their softmax. Built for AVX-512, AVX2 and the baseline, picked when the library loads; each
// loop on its own, so each vectorises.
__attribute__((target_clones("avx512f", "avx2", "default"))) bool FiniteSoftmaxRow(float* x,
                                                                                   int64_t c) {
  // The largest magnitude's bits (NaN and infinities at 0x7f800000 and above) and the largest
  // value as an integer that orders as the floats do: integer maxima, which vectorise.
  uint32_t most_abs = 0;
  int32_t most_key = INT32_MIN;
  for (int64_t j = 0; j < c; ++j) {
    const int32_t bits = std::bit_cast<int32_t>(x[j]);
    const uint32_t abs = static_cast<uint32_t>(bits) & 0x7fffffffu;
    const int32_t key = bits ^ ((bits >> 31) & 0x7fffffff);
    most_abs = abs > most_abs ? abs : most_abs;
    most_key = key > most_key ? key : most_key;
  }
  if (most_abs >= 0x7f800000u) return false;
  const float top = std::bit_cast<float>(most_key ^ ((most_key >> 31) & 0x7fffffff));
  for (int64_t j = 0; j < c; ++j) x[j] = ExpNonPositive(x[j] - top);
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < c; ++j) sum += x[j];
  const float inv = 1.f / sum;  // sum >= 1: the maximum's own term
  for (int64_t j = 0; j < c; ++j) x[j] *= inv;
  return true;
}

// The Softmax kernel's loop for a row with NaN or infinities: log-softmax in double, then exp.
void SpecialSoftmaxRow(float* x, int64_t c) {
  float top = x[0];
  for (int64_t j = 1; j < c; ++j) top = NanMax(top, x[j]);
  double sum = 0;
  for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(x[j] - top));
  const float log_sum = static_cast<float>(std::log(sum));
  for (int64_t j = 0; j < c; ++j) x[j] = std::exp(x[j] - top - log_sum);
}

}  // namespace

void MaskedSoftmaxRows(const float* add, const std::vector<int64_t>& add_dims, const Shape& y,
                       float* x) {
  const int64_t c = y[y.rank() - 1];
  if (c == 0) return;
  const BroadcastRows rows(add_dims, y);
  ParallelFor(y.num_elements() / c, std::max<int64_t>(1, kParallelGrain / c),
              [&](int64_t begin, int64_t end) {
                for (int64_t row = begin; row < end; ++row) {
                  float* dst = x + row * c;
                  rows.AddTo(add, row, dst);
                  if (!FiniteSoftmaxRow(dst, c)) SpecialSoftmaxRow(dst, c);
                }
              });
}

}  // namespace dflow::cpu
