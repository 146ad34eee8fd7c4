#include "ops/cpu/nan_aware.h"

#include <atomic>

#include "ops/cpu/parallel.h"

namespace dflow::cpu {

// Branch-free forms the compiler vectorises: a comparison with NaN is false, so NaN passes
// through both selects. The bounds are copied into the lambdas (by reference they would be
// reloaded per element, since the stores could alias them).
void ReluKeepingNaN(float* x, int64_t n) {
  ParallelFor(n, [x](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float v = x[i];
      x[i] = (v > 0.f || v != v) ? v : 0.f;  // -0 becomes +0, as max(x, 0) gives
    }
  });
}

void ClipKeepingNaN(float* x, int64_t n, float lo, float hi) {
  ParallelFor(n, [x, lo, hi](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      float v = x[i];
      v = v < lo ? lo : v;
      x[i] = v > hi ? hi : v;
    }
  });
}

bool AllFiniteParallel(const float* x, int64_t n) {
  std::atomic<bool> finite{true};
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    if (!AllFinite(x + begin, end - begin)) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load(std::memory_order_relaxed);
}

float MaxAbsParallel(const float* x, int64_t n) {
  std::atomic<float> most{0.f};
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    const float m = MaxAbs(x + begin, end - begin);
    float seen = most.load(std::memory_order_relaxed);
    while (m > seen && !most.compare_exchange_weak(seen, m, std::memory_order_relaxed)) {
    }
  });
  return most.load(std::memory_order_relaxed);
}

}  // namespace dflow::cpu
