#include "ops/cpu/gemv.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

#include "graph/allocator.h"
#include "ops/cpu/parallel.h"

namespace dflow::cpu {
namespace {

constexpr int64_t kPanel = kGemvPanel;

// One panel: y[0, width) = x W_panel + bias. The kPanel sums live in vector registers (eight
// AVX-512 or sixteen AVX2 ones); each row of the panel is one streaming read.
__attribute__((target_clones("avx512f", "avx2", "default"))) void PanelProduct(
    const float* x, const float* panel, const float* bias, float* y, int64_t k, int64_t width) {
  float sum[kPanel];
  for (int64_t j = 0; j < kPanel; ++j) sum[j] = 0.f;
  for (int64_t p = 0; p < k; ++p) {
    const float xp = x[p];
    const float* row = panel + p * kPanel;
#pragma GCC unroll 8
    for (int64_t j = 0; j < kPanel; ++j) sum[j] += xp * row[j];
  }
  for (int64_t j = 0; j < width; ++j) y[j] = bias != nullptr ? sum[j] + bias[j] : sum[j];
}

// The panels are read from memory on every product (a classifier's 5 MB leave the caches between
// steps): in 2 MiB pages the read costs no TLB miss per 4 KiB, which took a cold [1280, 1000]
// product from 106-146 to 67-78 us. Best effort, before the pages are first touched: the
// aligned 2 MiB stretches of the buffer are advised (THP "madvise" kernels need it).
void AdviseHugePages(void* data, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + kHuge - 1) / kHuge * kHuge,
                  end = (begin + bytes) / kHuge * kHuge;
  if (end > first) madvise(reinterpret_cast<void*>(first), end - first, MADV_HUGEPAGE);
}

}  // namespace

bool GemvPays(int64_t k, int64_t n) { return k >= 64 && n >= 64 && k * n >= (int64_t{1} << 16); }

Result<Tensor> GemvWeights::Get(const Tensor& w, int64_t k, int64_t n, bool transposed) {
  MutexLock lock(mu_);
  if (source_.raw_data() == w.raw_data() && transposed_ == transposed &&
      panels_.raw_data() != nullptr) {
    return panels_;
  }
  const int64_t panels = (n + kPanel - 1) / kPanel;
  ASSIGN_OR_RETURN(
      Tensor t, Tensor::Allocate(CpuAllocator::Default(), DType::kF32, Shape{panels, k, kPanel}));
  AdviseHugePages(t.raw_data(), t.num_bytes());
  const float* src = w.data<float>();
  float* dst = t.data<float>();
  for (int64_t q = 0; q < panels; ++q) {
    for (int64_t p = 0; p < k; ++p) {
      float* row = dst + (q * k + p) * kPanel;
      for (int64_t j = 0; j < kPanel; ++j) {
        const int64_t col = q * kPanel + j;
        row[j] = col >= n ? 0.f : transposed ? src[col * k + p] : src[p * n + col];
      }
    }
  }
  panels_ = std::move(t);
  source_ = w;
  transposed_ = transposed;
  return panels_;
}

void Gemv(const float* x, const float* panels, const float* bias, float* y, int64_t k, int64_t n) {
  const int64_t count = (n + kPanel - 1) / kPanel;
  // A panel per chunk at least; one thread when the whole W is small.
  const int64_t grain = k * n >= (int64_t{1} << 18) ? 1 : count;
  ParallelFor(count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      PanelProduct(x, panels + q * k * kPanel, bias != nullptr ? bias + q * kPanel : nullptr,
                   y + q * kPanel, k, std::min(kPanel, n - q * kPanel));
    }
  });
}

}  // namespace dflow::cpu
