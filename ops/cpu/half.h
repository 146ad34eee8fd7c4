// f16 and bf16 (raw 16 bits) to and from f32, rounding to nearest even: a NaN stays a quiet NaN,
// f16 overflows to infinity and underflows through its subnormals to zero. The Cast kernel's
// conversions, and the widening of f16 operands where oneDNN has no f16 primitive.
#pragma once

#include <cstdint>

#include "graph/dtype.h"

namespace dflow::cpu {

// `t` is kF16 or kBF16.
float HalfToFloat(DType t, uint16_t bits);
uint16_t FloatToHalf(DType t, float f);

// The same over n elements, split over the step's threads.
void HalfToFloat(DType t, const uint16_t* in, float* out, int64_t n);
void FloatToHalf(DType t, const float* in, uint16_t* out, int64_t n);

}  // namespace dflow::cpu
