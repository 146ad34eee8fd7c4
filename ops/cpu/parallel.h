// Internal: splits a loop over [0, n) across the calling thread's OpenMP team (its size is the
// intra-op share of the thread budget, see framework/device.h) when the loop is large enough to
// pay for it; runs it inline otherwise.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace dflow::cpu {

// Elements below which a loop stays on one thread: a fork/join costs a few microseconds.
inline constexpr int64_t kParallelGrain = 1 << 14;

// Calls f(begin, end) on disjoint chunks covering [0, n), each at least `grain` items.
template <typename F>
void ParallelFor(int64_t n, int64_t grain, F&& f) {
  int threads = omp_get_max_threads();
  if (n < 2 * grain || threads <= 1) {
    f(int64_t{0}, n);
    return;
  }
  int chunks = static_cast<int>(std::min<int64_t>(threads, n / grain));
#pragma omp parallel for num_threads(chunks) schedule(static)
  for (int t = 0; t < chunks; ++t) {
    int64_t begin = n * t / chunks, end = n * (t + 1) / chunks;
    f(begin, end);
  }
}

// For element-wise loops: chunks of at least kParallelGrain elements.
template <typename F>
void ParallelFor(int64_t n, F&& f) {
  ParallelFor(n, kParallelGrain, std::forward<F>(f));
}

}  // namespace dflow::cpu
