// Cast on the GPU: every pair of f32, f64, f16, bf16, i32, i64, u8 and bool, with the CPU
// kernel's rules (ops/cpu/unary_kernels.cc): f16 and bf16 go through f32, rounded to nearest
// even; to bool is "not zero".
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ops/cuda/grid.cuh"
#include "ops/cuda/launch.h"

namespace dflow::cuda {
namespace {

template <typename T>
__device__ __forceinline__ auto Load(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

template <typename D, typename V>
__device__ __forceinline__ D Store(V v) {
  if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != V(0);
  } else {
    return static_cast<D>(v);
  }
}

template <typename S, typename D>
__global__ void Cast(const S* in, D* out, int64_t n) {
  DFLOW_GRID_LOOP(i, n) { out[i] = Store<D>(Load(in[i])); }
}

template <typename S>
int LaunchFrom(CastType to, const void* in, void* out, int64_t n, cudaStream_t stream) {
  const S* pi = static_cast<const S*>(in);
  switch (to) {
#define DFLOW_CAST_TO(kType, D)                                                  \
  case CastType::kType:                                                          \
    Cast<S, D><<<Blocks(n), kThreads, 0, stream>>>(pi, static_cast<D*>(out), n); \
    break;
    DFLOW_CAST_TO(kF32, float)
    DFLOW_CAST_TO(kF64, double)
    DFLOW_CAST_TO(kF16, __half)
    DFLOW_CAST_TO(kBF16, __nv_bfloat16)
    DFLOW_CAST_TO(kI32, int32_t)
    DFLOW_CAST_TO(kI64, int64_t)
    DFLOW_CAST_TO(kU8, uint8_t)
    DFLOW_CAST_TO(kBool, bool)
#undef DFLOW_CAST_TO
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchCast(CastType from, CastType to, const void* in, void* out, int64_t n,
               CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (from) {
    case CastType::kF32:
      return LaunchFrom<float>(to, in, out, n, s);
    case CastType::kF64:
      return LaunchFrom<double>(to, in, out, n, s);
    case CastType::kF16:
      return LaunchFrom<__half>(to, in, out, n, s);
    case CastType::kBF16:
      return LaunchFrom<__nv_bfloat16>(to, in, out, n, s);
    case CastType::kI32:
      return LaunchFrom<int32_t>(to, in, out, n, s);
    case CastType::kI64:
      return LaunchFrom<int64_t>(to, in, out, n, s);
    case CastType::kU8:
      return LaunchFrom<uint8_t>(to, in, out, n, s);
    case CastType::kBool:
      return LaunchFrom<bool>(to, in, out, n, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace dflow::cuda
