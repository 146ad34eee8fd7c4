// Internal to the .cu files: a launch's result as launch.h's int, and the element type's C++
// type for a templated launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/launch.h"

namespace dflow::cuda {

inline int Invalid() { return static_cast<int>(cudaErrorInvalidValue); }
inline int LastError() { return static_cast<int>(cudaGetLastError()); }

// Calls f.template operator()<T>() for the element type's T.
template <typename F>
int Dispatch(ElemType type, F&& f) {
  switch (type) {
    case ElemType::kF32:
      return f.template operator()<float>();
    case ElemType::kF64:
      return f.template operator()<double>();
    case ElemType::kI32:
      return f.template operator()<int32_t>();
    case ElemType::kI64:
      return f.template operator()<int64_t>();
  }
  return Invalid();
}

}  // namespace dflow::cuda
