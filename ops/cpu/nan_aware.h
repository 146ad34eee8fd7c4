// NaN and infinities as TensorFlow and PyTorch treat them: a maximum or minimum with a NaN is
// NaN, and the oneDNN primitives that do otherwise (eltwise ReLU and its approximations of exp,
// log and the like, softmax, max pooling) are used only on finite inputs, the loops taking the
// rest.
#pragma once

#include <cstdint>
#include <cstring>

namespace dflow::cpu {

// max(a, b), NaN when either is NaN (std::max returns `a` when `b` is NaN).
template <typename T>
inline T NanMax(T a, T b) {
  return (b != b || b > a) ? b : a;
}
template <typename T>
inline T NanMin(T a, T b) {
  return (b != b || b < a) ? b : a;
}

// Whether `best` should give way to `v` in an arg-max scan: larger, or the first NaN.
template <typename T>
inline bool TakesMax(T v, T best) {
  return v > best || (v != v && best == best);
}

// Whether all n floats are finite (no NaN, no infinity): one pass over their exponent bits,
// which the compiler vectorises.
inline bool AllFinite(const float* x, int64_t n) {
  uint32_t all_ones_seen = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    all_ones_seen |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return all_ones_seen == 0;
}

// The largest magnitude of n floats, or +infinity when one is NaN or infinite (0 for none): one
// pass over their bits without the sign, which order as the magnitudes do and put NaN above
// infinity, so an integer maximum the compiler vectorises finds both.
inline float MaxAbs(const float* x, int64_t n) {
  uint32_t most = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    bits &= 0x7fffffffu;
    most = bits > most ? bits : most;
  }
  if (most >= 0x7f800000u) return __builtin_inff();
  float m;
  std::memcpy(&m, &most, sizeof(m));
  return m;
}

// ReLU over n floats in place, NaN kept: what the fused kernels apply where oneDNN's ReLU
// post-op (which turns NaN into 0) cannot be used. Threads split the floats.
void ReluKeepingNaN(float* x, int64_t n);
// x clipped to [lo, hi] in place, NaN kept.
void ClipKeepingNaN(float* x, int64_t n, float lo, float hi);
// AllFinite split across the calling thread's OpenMP team.
bool AllFiniteParallel(const float* x, int64_t n);
// MaxAbs split across the calling thread's OpenMP team.
float MaxAbsParallel(const float* x, int64_t n);

}  // namespace dflow::cpu
