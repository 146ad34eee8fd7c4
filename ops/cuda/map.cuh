// Internal to the .cu files: element-wise maps over same-shaped tensors that move 16 bytes per
// load and store (four f32 or i32, two f64 or i64) where every pointer allows it, one element at
// a time where one does not. A map is memory-bound: wide accesses let fewer instructions keep the
// memory system busy (a ReLU over a batch-128 ResNet activation ran at about half the bandwidth
// of PyTorch's vectorised kernel with one element per thread).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/grid.cuh"

namespace dflow::cuda {

// kWidth elements of T, aligned as one access.
template <typename T, int kWidth>
struct alignas(sizeof(T) * kWidth) Pack {
  T v[kWidth];
};

// Elements of T per 16-byte access.
template <typename T>
inline constexpr int kPackWidth = sizeof(T) <= 16 ? static_cast<int>(16 / sizeof(T)) : 1;

// The inputs of a map: kInputs pointers of n elements each.
template <typename T, int kInputs>
struct MapInputs {
  const T* in[kInputs];
};

template <typename T, int kInputs, typename F>
__device__ __forceinline__ T ApplyMap(const F& f, const T (&x)[kInputs]) {
  static_assert(kInputs >= 1 && kInputs <= 3, "maps take one to three inputs");
  if constexpr (kInputs == 1) {
    return f(x[0]);
  } else if constexpr (kInputs == 2) {
    return f(x[0], x[1]);
  } else {
    return f(x[0], x[1], x[2]);
  }
}

// out[i] = f(in[0][i], ...) for i in [0, n), kWidth elements per access.
template <int kWidth, typename T, int kInputs, typename F>
__global__ void MapKernel(MapInputs<T, kInputs> inputs, T* out, int64_t n, F f) {
  using P = Pack<T, kWidth>;
  const int64_t packs = n / kWidth;
  DFLOW_GRID_LOOP(p, packs) {
    P in[kInputs];
    for (int k = 0; k < kInputs; ++k) in[k] = reinterpret_cast<const P*>(inputs.in[k])[p];
    P result;
#pragma unroll
    for (int j = 0; j < kWidth; ++j) {
      T x[kInputs];
      for (int k = 0; k < kInputs; ++k) x[k] = in[k].v[j];
      result.v[j] = ApplyMap<T, kInputs>(f, x);
    }
    reinterpret_cast<P*>(out)[p] = result;
  }
  // The last n % kWidth elements, one per thread of the first block.
  if (blockIdx.x == 0) {
    const int64_t i = packs * kWidth + threadIdx.x;
    if (i < n) {
      T x[kInputs];
      for (int k = 0; k < kInputs; ++k) x[k] = inputs.in[k][i];
      out[i] = ApplyMap<T, kInputs>(f, x);
    }
  }
}

// Launches out[i] = f(inputs...[i]) on `stream`: 16-byte accesses when every pointer is aligned
// to them, else one element at a time. Returns the launch's cudaError_t as int.
template <typename T, typename F, typename... In>
int LaunchMap(F f, T* out, int64_t n, cudaStream_t stream, const In*... in) {
  constexpr int kInputs = sizeof...(In);
  constexpr int kWidth = kPackWidth<T>;
  MapInputs<T, kInputs> inputs{{in...}};
  if (n == 0) return 0;
  bool aligned = reinterpret_cast<uintptr_t>(out) % (sizeof(T) * kWidth) == 0;
  for (const T* p : inputs.in) {
    aligned = aligned && reinterpret_cast<uintptr_t>(p) % (sizeof(T) * kWidth) == 0;
  }
  if (aligned && kWidth > 1) {
    MapKernel<kWidth, T, kInputs>
        <<<Blocks((n + kWidth - 1) / kWidth), kThreads, 0, stream>>>(inputs, out, n, f);
  } else {
    MapKernel<1, T, kInputs><<<Blocks(n), kThreads, 0, stream>>>(inputs, out, n, f);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace dflow::cuda
