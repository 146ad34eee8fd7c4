// The CUDA side of the GPU kernels: launches on a stream, with plain arguments, so that the
// .cu files need none of dflow's headers (nvcc compiles only these) and the OpKernel classes
// (elementwise_kernels.cc) are plain C++. Each returns the cudaError_t of the launch as an int.
#pragma once

#include <cstdint>

#include "framework/cuda_stream.h"

namespace dflow::cuda {

enum class ElemType { kF32, kF64, kI32, kI64 };
enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum };

inline constexpr int kMaxRank = 8;

// How an output index maps to the inputs' offsets under broadcasting: row-major output
// dimensions and each input's element strides (0 on broadcast dimensions).
struct BroadcastIndex {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};
};

// out[i] = op(a[..], b[..]) for i < n; `index` null when a, b and out have the same shape.
int LaunchBinary(BinaryOp op, ElemType type, const void* a, const void* b, void* out, int64_t n,
                 const BroadcastIndex* index, CudaStream stream);
// y = max(x, 0).
int LaunchRelu(ElemType type, const void* x, void* y, int64_t n, CudaStream stream);
// dx = x > 0 ? dy : 0.
int LaunchReluGrad(ElemType type, const void* dy, const void* x, void* dx, int64_t n,
                   CudaStream stream);
// The name and text of a CUDA error code.
const char* ErrorName(int error);
const char* ErrorString(int error);

}  // namespace dflow::cuda
