// Launch geometry shared by the .cu files: grid-stride loops of 256-thread blocks.
#pragma once

#include <cstdint>

namespace dflow::cuda {

inline constexpr int kThreads = 256;

// Blocks for n elements, capped (a grid-stride loop covers the rest).
inline int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 32 ? blocks : 65535 * 32);
}

// for (i in this thread's share of [0, n)).
#define DFLOW_GRID_LOOP(i, n)                                               \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{blockDim.x} * gridDim.x)

}  // namespace dflow::cuda
