// What the runtime's CUDA files share (built only with DFLOW_WITH_CUDA, after
// cuda_runtime_api.h): a CUDA error as a Status, and running with a GPU as the current device.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "graph/status.h"

namespace dflow {

// A CUDA error as an Internal Status naming what failed and where.
inline Status CudaError(cudaError_t e, std::string_view what, std::string_view where) {
  return Internal("{} on {} failed: {} ({})", what, where, cudaGetErrorString(e),
                  cudaGetErrorName(e));
}

// Runs `fn` with `ordinal` as the calling thread's current device, restoring the one before.
template <typename F>
auto OnDevice(int ordinal, F&& fn) {
  int before = -1;
  const bool had = cudaGetDevice(&before) == cudaSuccess;
  if (!had || before != ordinal) cudaSetDevice(ordinal);
  auto result = fn();
  if (had && before != ordinal) cudaSetDevice(before);
  return result;
}

}  // namespace dflow
