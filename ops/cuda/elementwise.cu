// Element-wise GPU kernels: same-shaped operands as maps of 16-byte accesses (ops/cuda/map.cuh);
// broadcasting in grid-stride loops, one thread per output element, by per-dimension strides
// (ops/cuda/launch.h).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/grid.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/map.cuh"

namespace dflow::cuda {
namespace {

template <BinaryOp kOp, typename T>
__device__ __forceinline__ T Apply(T a, T b) {
  if constexpr (kOp == BinaryOp::kAdd) return a + b;
  if constexpr (kOp == BinaryOp::kSub) return a - b;
  if constexpr (kOp == BinaryOp::kMul) return a * b;
  if constexpr (kOp == BinaryOp::kDiv) {
    // Integer division by zero is refused before the launch (LaunchCountZeros); never trap.
    if constexpr (std::is_integral_v<T>) return b == T(0) ? T(0) : a / b;
    return a / b;
  }
  if constexpr (kOp == BinaryOp::kPow) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(pow(static_cast<double>(a), static_cast<double>(b)));
    }
    return pow(a, b);
  }
  // NaN when either is NaN, as on the CPU (ops/cpu/nan_aware.h) and in PyTorch.
  if constexpr (kOp == BinaryOp::kMaximum) return (b != b || b > a) ? b : a;
  if constexpr (kOp == BinaryOp::kMinimum) return (b != b || b < a) ? b : a;
  return a;  // not reached
}

// Same-shaped operands: a map (ops/cuda/map.cuh).
template <BinaryOp kOp>
struct BinaryFn {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return Apply<kOp>(a, b);
  }
};

// Index type I: 32-bit division where the output has fewer than 2^31 elements (the common
// case; 64-bit division costs several times more per dimension and element).
template <BinaryOp kOp, typename T, typename I>
__global__ void BinaryBroadcast(const T* a, const T* b, T* out, int64_t n, BroadcastIndex index) {
  DFLOW_GRID_LOOP(i, n) {
    I rest = static_cast<I>(i), ia = 0, ib = 0;
    for (int d = index.rank - 1; d >= 0; --d) {
      const I dim = static_cast<I>(index.out_dims[d]);
      const I coord = rest % dim;
      rest /= dim;
      ia += coord * static_cast<I>(index.a_strides[d]);
      ib += coord * static_cast<I>(index.b_strides[d]);
    }
    out[i] = Apply<kOp>(a[ia], b[ib]);
  }
}

template <BinaryOp kOp, typename T>
int Launch(const void* a, const void* b, void* out, int64_t n, const BroadcastIndex* index,
           cudaStream_t stream) {
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  T* po = static_cast<T*>(out);
  if (index == nullptr) {
    return LaunchMap(BinaryFn<kOp>{}, po, n, stream, pa, pb);
  } else {
    if (n <= INT32_MAX) {
      BinaryBroadcast<kOp, T, uint32_t><<<Blocks(n), kThreads, 0, stream>>>(pa, pb, po, n, *index);
    } else {
      BinaryBroadcast<kOp, T, int64_t><<<Blocks(n), kThreads, 0, stream>>>(pa, pb, po, n, *index);
    }
  }
  return static_cast<int>(cudaGetLastError());
}

template <BinaryOp kOp>
int LaunchTyped(ElemType type, const void* a, const void* b, void* out, int64_t n,
                const BroadcastIndex* index, cudaStream_t stream) {
  switch (type) {
    case ElemType::kF32:
      return Launch<kOp, float>(a, b, out, n, index, stream);
    case ElemType::kF64:
      return Launch<kOp, double>(a, b, out, n, index, stream);
    case ElemType::kI32:
      return Launch<kOp, int32_t>(a, b, out, n, index, stream);
    case ElemType::kI64:
      return Launch<kOp, int64_t>(a, b, out, n, index, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

int LaunchBinary(BinaryOp op, ElemType type, const void* a, const void* b, void* out, int64_t n,
                 const BroadcastIndex* index, CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (op) {
    case BinaryOp::kAdd:
      return LaunchTyped<BinaryOp::kAdd>(type, a, b, out, n, index, s);
    case BinaryOp::kSub:
      return LaunchTyped<BinaryOp::kSub>(type, a, b, out, n, index, s);
    case BinaryOp::kMul:
      return LaunchTyped<BinaryOp::kMul>(type, a, b, out, n, index, s);
    case BinaryOp::kDiv:
      return LaunchTyped<BinaryOp::kDiv>(type, a, b, out, n, index, s);
    case BinaryOp::kMaximum:
      return LaunchTyped<BinaryOp::kMaximum>(type, a, b, out, n, index, s);
    case BinaryOp::kMinimum:
      return LaunchTyped<BinaryOp::kMinimum>(type, a, b, out, n, index, s);
    case BinaryOp::kPow:
      return LaunchTyped<BinaryOp::kPow>(type, a, b, out, n, index, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

const char* ErrorName(int error) { return cudaGetErrorName(static_cast<cudaError_t>(error)); }
const char* ErrorString(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace dflow::cuda
