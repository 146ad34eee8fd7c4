#include "ops/cpu/nan_aware.h"

#include "ops/cpu/parallel.h"

namespace dflow::cpu {

void ReluKeepingNaN(float* x, int64_t n) {
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] = (x[i] > 0.f || x[i] != x[i]) ? x[i] : 0.f;
  });
}

}  // namespace dflow::cpu
