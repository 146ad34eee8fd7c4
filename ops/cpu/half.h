// f16 and bf16 (raw 16 bits) to and from f32, rounding to nearest even: a NaN stays a quiet NaN,
// f16 overflows to infinity and underflows through its subnormals to zero. The Cast kernel's
// conversions, and the widening of f16 operands where oneDNN has no f16 primitive.
#pragma once

#include <cstdint>

#include "graph/dtype.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "ops/cpu/dnnl_context.h"

namespace dflow::cpu {

// `t` is kF16 or kBF16.
float HalfToFloat(DType t, uint16_t bits);
uint16_t FloatToHalf(DType t, float f);

// The same over n elements, split over the step's threads.
void HalfToFloat(DType t, const uint16_t* in, float* out, int64_t n);
void FloatToHalf(DType t, const float* in, uint16_t* out, int64_t n);

// An f16 op computed in f32: a and b (f16) widened exactly into buffers from `temp`,
// run(a32, b32, out32) called on them, its result rounded once into `out` (f16).
template <typename F>
Status WidenedF16(TempBuffers& temp, const Tensor& a, const Tensor& b, Tensor& out, F&& run) {
  const int64_t na = a.num_elements(), nb = b.num_elements(), no = out.num_elements();
  ASSIGN_OR_RETURN(void* wa, temp.Get(na * sizeof(float)));
  ASSIGN_OR_RETURN(void* wb, temp.Get(nb * sizeof(float)));
  ASSIGN_OR_RETURN(void* wo, temp.Get(no * sizeof(float)));
  HalfToFloat(DType::kF16, static_cast<const uint16_t*>(a.raw_data()), static_cast<float*>(wa), na);
  HalfToFloat(DType::kF16, static_cast<const uint16_t*>(b.raw_data()), static_cast<float*>(wb), nb);
  RETURN_IF_ERROR(run(wa, wb, wo));
  FloatToHalf(DType::kF16, static_cast<const float*>(wo), static_cast<uint16_t*>(out.raw_data()),
              no);
  return Status::OK();
}

}  // namespace dflow::cpu
