// Internal: calls a templated lambda with the C++ type of a runtime dtype.
//   return DispatchNumeric(t.dtype(), [&]<typename T>() { ... });
#pragma once

#include "graph/dtype.h"
#include "graph/status.h"

namespace dflow::cpu {

template <typename F>
Status DispatchNumeric(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return f.template operator()<float>();
    case DType::kF64:
      return f.template operator()<double>();
    case DType::kI32:
      return f.template operator()<int32_t>();
    case DType::kI64:
      return f.template operator()<int64_t>();
    default:
      return InvalidArgument("no CPU kernel for dtype {}", dtype);
  }
}

// f32 and f64 only.
template <typename F>
Status DispatchFloat(DType dtype, F&& f) {
  if (dtype == DType::kF32) return f.template operator()<float>();
  if (dtype == DType::kF64) return f.template operator()<double>();
  return InvalidArgument("no CPU kernel for dtype {}", dtype);
}

// Numeric types plus u8 and bool.
template <typename F>
Status DispatchAll(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kU8:
      return f.template operator()<uint8_t>();
    case DType::kBool:
      return f.template operator()<bool>();
    default:
      return DispatchNumeric(dtype, std::forward<F>(f));
  }
}

}  // namespace dflow::cpu
