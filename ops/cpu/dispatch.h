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

}  // namespace dflow::cpu
