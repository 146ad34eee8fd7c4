// Element-wise GPU kernels: grid-stride loops, one thread per output element, broadcasting by
// per-dimension strides (ops/cuda/launch.h).
#include <cuda_runtime.h>

#include "ops/cuda/grid.cuh"
#include "ops/cuda/launch.h"

namespace dflow::cuda {
namespace {

template <BinaryOp kOp, typename T>
__device__ __forceinline__ T Apply(T a, T b) {
  if constexpr (kOp == BinaryOp::kAdd) return a + b;
  if constexpr (kOp == BinaryOp::kSub) return a - b;
  if constexpr (kOp == BinaryOp::kMul) return a * b;
  if constexpr (kOp == BinaryOp::kDiv) return a / b;
  // NaN when either is NaN, as on the CPU (ops/cpu/nan_aware.h) and in PyTorch.
  if constexpr (kOp == BinaryOp::kMaximum) return (b != b || b > a) ? b : a;
  if constexpr (kOp == BinaryOp::kMinimum) return (b != b || b < a) ? b : a;
}

template <BinaryOp kOp, typename T>
__global__ void BinarySame(const T* a, const T* b, T* out, int64_t n) {
  DFLOW_GRID_LOOP(i, n) { out[i] = Apply<kOp>(a[i], b[i]); }
}

template <BinaryOp kOp, typename T>
__global__ void BinaryBroadcast(const T* a, const T* b, T* out, int64_t n, BroadcastIndex index) {
  DFLOW_GRID_LOOP(i, n) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int d = index.rank - 1; d >= 0; --d) {
      const int64_t coord = rest % index.out_dims[d];
      rest /= index.out_dims[d];
      ia += coord * index.a_strides[d];
      ib += coord * index.b_strides[d];
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
    BinarySame<kOp, T><<<Blocks(n), kThreads, 0, stream>>>(pa, pb, po, n);
  } else {
    BinaryBroadcast<kOp, T><<<Blocks(n), kThreads, 0, stream>>>(pa, pb, po, n, *index);
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

template <typename T>
__global__ void Relu(const T* x, T* y, int64_t n) {
  DFLOW_GRID_LOOP(i, n) { y[i] = (x[i] > T(0) || x[i] != x[i]) ? x[i] : T(0); }  // NaN kept
}

template <typename T>
__global__ void ReluGrad(const T* dy, const T* x, T* dx, int64_t n) {
  DFLOW_GRID_LOOP(i, n) { dx[i] = x[i] > T(0) ? dy[i] : T(0); }
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
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int LaunchRelu(ElemType type, const void* x, void* y, int64_t n, CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (type == ElemType::kF32) {
    Relu<<<Blocks(n), kThreads, 0, s>>>(static_cast<const float*>(x), static_cast<float*>(y), n);
  } else if (type == ElemType::kF64) {
    Relu<<<Blocks(n), kThreads, 0, s>>>(static_cast<const double*>(x), static_cast<double*>(y), n);
  } else {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

int LaunchReluGrad(ElemType type, const void* dy, const void* x, void* dx, int64_t n,
                   CudaStream stream) {
  if (n == 0) return 0;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (type == ElemType::kF32) {
    ReluGrad<<<Blocks(n), kThreads, 0, s>>>(
        static_cast<const float*>(dy), static_cast<const float*>(x), static_cast<float*>(dx), n);
  } else if (type == ElemType::kF64) {
    ReluGrad<<<Blocks(n), kThreads, 0, s>>>(
        static_cast<const double*>(dy), static_cast<const double*>(x), static_cast<double*>(dx), n);
  } else {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

const char* ErrorName(int error) { return cudaGetErrorName(static_cast<cudaError_t>(error)); }
const char* ErrorString(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace dflow::cuda
