#include "ops/cpu/half.h"

#include <cmath>
#include <cstring>

#include "ops/cpu/parallel.h"

namespace dflow::cpu {

float HalfToFloat(DType t, uint16_t bits) {
  uint32_t u;
  if (t == DType::kBF16) {
    u = uint32_t{bits} << 16;
  } else {
    const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
    const uint32_t exp = (bits >> 10) & 0x1f, mant = bits & 0x3ffu;
    if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in f32
      const float v = std::ldexp(static_cast<float>(mant), -24);
      return (bits & 0x8000u) ? -v : v;
    }
    u = exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToHalf(DType t, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (t == DType::kBF16) {
    if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return static_cast<uint16_t>(u >> 16);
  }
  const uint32_t sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 2^16: infinity
  const int e = static_cast<int>(abs >> 23) - 127;
  const uint32_t m24 = (abs & 0x7fffffu) | 0x800000u;
  uint32_t h, rest, half;
  if (e >= -14) {  // normal: keep 10 of the 23 mantissa bits
    h = (static_cast<uint32_t>(e + 15) << 10) | ((abs & 0x7fffffu) >> 13);
    rest = abs & 0x1fffu;
    half = 0x1000u;
  } else {                       // subnormal: units of 2^-24
    const int shift = -(e + 1);  // >= 14
    if (shift > 24) return static_cast<uint16_t>(sign);
    h = m24 >> shift;
    rest = m24 & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  }
  if (rest > half || (rest == half && (h & 1))) ++h;  // a carry may reach infinity: right
  return static_cast<uint16_t>(sign | h);
}

namespace {

// bf16's conversions without branches, so that GCC vectorises them: widening is a shift;
// narrowing rounds to nearest even, a NaN kept quiet by setting its top mantissa bit. Built for
// AVX-512 and AVX2 besides the baseline, chosen at load.
[[gnu::target_clones("avx512f", "avx2", "default")]] void Bf16ToFloat(const uint16_t* in,
                                                                      float* out, int64_t n) {
  auto* o = reinterpret_cast<uint32_t*>(out);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = uint32_t{in[i]} << 16;
}

[[gnu::target_clones("avx512f", "avx2", "default")]] void FloatToBf16(const float* in,
                                                                      uint16_t* out, int64_t n) {
  const auto* u = reinterpret_cast<const uint32_t*>(in);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t v = u[i];
    const uint32_t rounded = (v + 0x7fffu + ((v >> 16) & 1u)) >> 16;
    const uint32_t quiet = (v >> 16) | 0x40u;
    out[i] = static_cast<uint16_t>((v & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
}

}  // namespace

void HalfToFloat(DType t, const uint16_t* in, float* out, int64_t n) {
  ParallelFor(n, [=](int64_t begin, int64_t end) {
    if (t == DType::kBF16) return Bf16ToFloat(in + begin, out + begin, end - begin);
    for (int64_t i = begin; i < end; ++i) out[i] = HalfToFloat(t, in[i]);
  });
}

void FloatToHalf(DType t, const float* in, uint16_t* out, int64_t n) {
  ParallelFor(n, [=](int64_t begin, int64_t end) {
    if (t == DType::kBF16) return FloatToBf16(in + begin, out + begin, end - begin);
    for (int64_t i = begin; i < end; ++i) out[i] = FloatToHalf(t, in[i]);
  });
}

}  // namespace dflow::cpu
