// Internal: products of one row by a constant matrix (a classifier at batch 1), y = x W + bias.
//
// oneDNN's matmul reads a [1280, 1000] W at M = 1 at 20-40 GB/s; here W is packed once into
// column panels (kGemvPanel columns each, every panel its K rows contiguous, zero-padded past
// N), so each thread streams whole panels and keeps their sums in registers. The product is
// bound by reading W, once.
#pragma once

#include <cstdint>

#include "graph/mutex.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace dflow::cpu {

inline constexpr int64_t kGemvPanel = 128;

// Whether a [1, k] x [k, n] product is worth the panel layout: W at least 256 KiB (below it,
// oneDNN's kernel is as fast and the packed copy not worth keeping).
bool GemvPays(int64_t k, int64_t n);

// A constant W [k, n] (or [n, k] when `transposed`) in panels, made on the first call and kept
// while the calls bring the same tensor (the buffer a Const holds, which is kept alive here, so
// its address cannot come back as another tensor's).
class GemvWeights {
 public:
  // The panels of `w`: ceil(n / kGemvPanel) blocks of k x kGemvPanel floats.
  Result<Tensor> Get(const Tensor& w, int64_t k, int64_t n, bool transposed) DFLOW_EXCLUDES(mu_);

 private:
  Mutex mu_;
  Tensor source_ DFLOW_GUARDED_BY(mu_);
  bool transposed_ DFLOW_GUARDED_BY(mu_) = false;
  Tensor panels_ DFLOW_GUARDED_BY(mu_);
};

// y[0, n) = x[0, k) W + bias (bias may be null) with W in GemvWeights' panels; the panels split
// across the calling thread's OpenMP team. NaN and infinities propagate as in the plain sums.
void Gemv(const float* x, const float* panels, const float* bias, float* y, int64_t k, int64_t n);

}  // namespace dflow::cpu
