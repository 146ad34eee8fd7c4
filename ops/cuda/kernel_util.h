// Internal: what the GPU OpKernels share: the launch type of a dtype, the device's stream, and
// launch errors as a Status.
#pragma once

#include <optional>
#include <string_view>

#include "framework/kernel.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/launch.h"

namespace dflow::cuda {

// The launch type of a dtype; nullopt for dtypes without GPU kernels.
inline std::optional<ElemType> ElemTypeOf(DType d) {
  switch (d) {
    case DType::kF32:
      return ElemType::kF32;
    case DType::kF64:
      return ElemType::kF64;
    case DType::kI32:
      return ElemType::kI32;
    case DType::kI64:
      return ElemType::kI64;
    default:
      return std::nullopt;
  }
}

// Cast's element type of a dtype (also AllFinite's); nullopt for dtypes it does not take.
inline std::optional<CastType> CastTypeOf(DType d) {
  switch (d) {
    case DType::kF32:
      return CastType::kF32;
    case DType::kF64:
      return CastType::kF64;
    case DType::kF16:
      return CastType::kF16;
    case DType::kBF16:
      return CastType::kBF16;
    case DType::kI32:
      return CastType::kI32;
    case DType::kI64:
      return CastType::kI64;
    case DType::kU8:
      return CastType::kU8;
    case DType::kBool:
      return CastType::kBool;
    default:
      return std::nullopt;
  }
}

// The launch type of `t`'s dtype; InvalidArgument for one without GPU kernels (or, with
// `floats_only`, one that is not f32 or f64).
inline Result<ElemType> TypeOf(const Tensor& t, bool floats_only = false) {
  auto type = ElemTypeOf(t.dtype());
  if (!type || (floats_only && *type != ElemType::kF32 && *type != ElemType::kF64)) {
    return InvalidArgument("no GPU kernel for dtype {}", t.dtype());
  }
  return *type;
}

// The compute stream of the kernel's device.
inline Result<CudaStream> StreamOf(KernelContext& ctx) {
  auto* c = dynamic_cast<CudaContext*>(ctx.device_context());
  if (c == nullptr) return Internal("a GPU kernel ran without the CUDA device's context");
  return c->stream();
}

// OK, or Internal naming `what` and the CUDA error of its launch.
inline Status Launched(int error, std::string_view what) {
  if (error == 0) return Status::OK();
  return Internal("launching {} on the GPU failed: {} ({})", what, ErrorString(error),
                  ErrorName(error));
}

}  // namespace dflow::cuda
