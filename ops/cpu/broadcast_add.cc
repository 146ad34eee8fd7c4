#include "ops/cpu/broadcast_add.h"

#include <algorithm>
#include <atomic>

#include "ops/cpu/nan_aware.h"
#include "ops/cpu/parallel.h"

namespace dflow::cpu {

BroadcastRows::BroadcastRows(const std::vector<int64_t>& add_dims, const Shape& y)
    : y_(y), stride_(y.rank(), 0) {
  int64_t step = 1;
  for (int i = y.rank() - 1; i >= 0; --i) {
    stride_[i] = add_dims[i] == 1 ? 0 : step;
    step *= add_dims[i];
  }
}

void BroadcastRows::AddTo(const float* add, int64_t row, float* dst) const {
  const int r = y_.rank();
  int64_t rest = row, offset = 0;
  for (int i = r - 2; i >= 0; --i) {
    offset += rest % y_[i] * stride_[i];
    rest /= y_[i];
  }
  const float* src = add + offset;
  const int64_t n = y_[r - 1];
  if (stride_[r - 1] != 0) {  // a row of the addend
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
  } else {  // one value for the row
    const float s = *src;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dst[j] += s;
  }
}

float AddBroadcastBounded(const float* add, const std::vector<int64_t>& add_dims, const Shape& y,
                          float* out) {
  const BroadcastRows rows(add_dims, y);
  const int64_t n = y[y.rank() - 1], count = y.num_elements() / std::max<int64_t>(n, 1);
  std::atomic<float> most{0.f};
  ParallelFor(count, 64, [&](int64_t begin, int64_t end) {
    float local = 0;
    for (int64_t row = begin; row < end; ++row) {
      float* dst = out + row * n;
      rows.AddTo(add, row, dst);
      local = std::max(local, MaxAbs(dst, n));
    }
    float seen = most.load(std::memory_order_relaxed);
    while (local > seen && !most.compare_exchange_weak(seen, local, std::memory_order_relaxed)) {
    }
  });
  return most.load(std::memory_order_relaxed);
}

}  // namespace dflow::cpu
