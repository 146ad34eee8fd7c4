#include "ops/cpu/broadcast_add.h"

#include <algorithm>
#include <atomic>

#include "ops/cpu/nan_aware.h"
#include "ops/cpu/parallel.h"

namespace dflow::cpu {

float AddBroadcastBounded(const float* add, const std::vector<int64_t>& add_dims, const Shape& y,
                          float* out) {
  const int r = y.rank();
  std::vector<int64_t> stride(r, 0);  // the addend's stride along each of y's dimensions
  int64_t step = 1;
  for (int i = r - 1; i >= 0; --i) {
    stride[i] = add_dims[i] == 1 ? 0 : step;
    step *= add_dims[i];
  }
  const int64_t n = y[r - 1], rows = y.num_elements() / std::max<int64_t>(n, 1);
  const bool along = stride[r - 1] != 0;  // a row of the addend, or one value for the row
  std::atomic<float> most{0.f};
  ParallelFor(rows, 64, [&](int64_t begin, int64_t end) {
    float local = 0;
    for (int64_t row = begin; row < end; ++row) {
      int64_t rest = row, offset = 0;
      for (int i = r - 2; i >= 0; --i) {
        offset += rest % y[i] * stride[i];
        rest /= y[i];
      }
      float* dst = out + row * n;
      const float* src = add + offset;
      if (along) {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
      } else {
        const float s = *src;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) dst[j] += s;
      }
      local = std::max(local, MaxAbs(dst, n));
    }
    float seen = most.load(std::memory_order_relaxed);
    while (local > seen && !most.compare_exchange_weak(seen, local, std::memory_order_relaxed)) {
    }
  });
  return most.load(std::memory_order_relaxed);
}

}  // namespace dflow::cpu
