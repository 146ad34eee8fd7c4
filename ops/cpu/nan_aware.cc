#include "ops/cpu/nan_aware.h"

#include <atomic>

#include "ops/cpu/parallel.h"

namespace dflow::cpu {

void ReluKeepingNaN(float* x, int64_t n) {
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] = (x[i] > 0.f || x[i] != x[i]) ? x[i] : 0.f;
  });
}

void ClipKeepingNaN(float* x, int64_t n, float lo, float hi) {
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
  });
}

bool AllFiniteParallel(const float* x, int64_t n) {
  std::atomic<bool> finite{true};
  ParallelFor(n, 1 << 16, [&](int64_t begin, int64_t end) {
    if (!AllFinite(x + begin, end - begin)) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load(std::memory_order_relaxed);
}

}  // namespace dflow::cpu
