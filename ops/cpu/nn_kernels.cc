// CPU kernels of Softmax, LogSoftmax and SparseSoftmaxCrossEntropyWithLogits, over the last axis
// with the row maximum subtracted for stability. f32 Softmax and LogSoftmax run on oneDNN's
// softmax primitives; the rest on loops.
#include "ops/common/nn_kernels.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/dnnl_context.h"
#include "ops/cpu/nan_aware.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/primitive_cache.h"

namespace dflow::cpu {
namespace {

// Writes log softmax of row x (length c) to out; returns nothing.
template <typename T>
void LogSoftmaxRow(const T* x, T* out, int64_t c) {
  T max = x[0];
  for (int64_t j = 1; j < c; ++j) max = NanMax(max, x[j]);
  double sum = 0;
  for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(x[j] - max));
  T log_sum = static_cast<T>(std::log(sum));
  for (int64_t j = 0; j < c; ++j) out[j] = x[j] - max - log_sum;
}

// Softmax or log-softmax of `rows` rows of c floats on oneDNN (x == y is fine).
template <bool kLog>
void RunDnnlSoftmax(int64_t rows, int64_t c, const void* x, void* y) {
  using Prim = std::conditional_t<kLog, dnnl::logsoftmax_forward, dnnl::softmax_forward>;
  struct Entry {
    Prim prim;
    dnnl::memory::desc data;
  };
  std::string key = fmt::format("{}:{}:{}", kLog ? "logsoftmax" : "softmax", rows, c);
  auto p = PrimitiveCache::Global().GetOrCreate<Entry>(key, [&] {
    dnnl::memory::desc data({rows, c}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
    typename Prim::primitive_desc pd(
        typename Prim::desc(dnnl::prop_kind::forward_inference, data, 1), CpuEngine());
    return std::make_shared<const Entry>(Entry{Prim(pd), data});
  });
  const auto& e = CpuEngine();
  dnnl::memory xm(p->data, e, const_cast<void*>(x)), ym(p->data, e, y);
  dnnl::stream& s = ThreadStream();
  p->prim.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DST, ym}});
  s.wait();
}

template <bool kLog>
class SoftmaxKernel : public common::SoftmaxBase<SoftmaxKernel<kLog>> {
 public:
  using common::SoftmaxBase<SoftmaxKernel>::SoftmaxBase;
  Status Run(KernelContext& ctx, const Tensor& x, int64_t c) {
    // oneDNN's softmax loses a NaN or an infinity of a row: inputs with one take the loops.
    // A bounded input (Tensor::known_bound: an attention's scores) needs no check.
    if (x.dtype() == DType::kF32 &&
        (x.known_finite() || AllFiniteParallel(x.data<float>(), x.num_elements()))) {
      ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
      if (c > 0 && x.num_elements() > 0) {
        RunDnnlSoftmax<kLog>(x.num_elements() / c, c, x.raw_data(), out->raw_data());
      }
      return Status::OK();
    }
    return DispatchFloat(x.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
      int64_t rows = c == 0 ? 0 : x.num_elements() / c;
      const T* px = x.data<T>();
      T* po = out->data<T>();
      for (int64_t r = 0; r < rows; ++r) {
        LogSoftmaxRow(px + r * c, po + r * c, c);
        if (!kLog) {
          for (int64_t j = 0; j < c; ++j) po[r * c + j] = std::exp(po[r * c + j]);
        }
      }
      return Status::OK();
    });
  }
};

class SparseCrossEntropyKernel : public common::CrossEntropyBase<SparseCrossEntropyKernel> {
 public:
  using CrossEntropyBase::CrossEntropyBase;
  Status Run(KernelContext& ctx, const Tensor& logits, const Tensor& labels, int64_t n, int64_t c) {
    return DispatchFloat(logits.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * loss, ctx.AllocateOutput(0, logits.dtype(), Shape{n}));
      ASSIGN_OR_RETURN(Tensor * back, ctx.AllocateOutput(1, logits.dtype(), Shape{n, c}));
      const T* px = logits.data<T>();
      T* pl = loss->data<T>();
      T* pb = back->data<T>();
      for (int64_t r = 0; r < n; ++r) {
        int64_t label =
            labels.dtype() == DType::kI32 ? labels.data<int32_t>()[r] : labels.data<int64_t>()[r];
        if (label < 0 || label >= c) {
          return InvalidArgument("label {} at row {} is outside [0, {})", label, r, c);
        }
        LogSoftmaxRow(px + r * c, pb + r * c, c);
        pl[r] = -pb[r * c + label];
        for (int64_t j = 0; j < c; ++j) pb[r * c + j] = std::exp(pb[r * c + j]);
        pb[r * c + label] -= T(1);
      }
      return Status::OK();
    });
  }
};

// A mix of (seed, run, element) into 64 uniform bits: splitmix64's finaliser.
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class DropoutKernel : public OpKernel {
 public:
  explicit DropoutKernel(const KernelInit& init)
      : rate_(std::get<double>(*init.node.FindAttr("rate"))),
        seed_(static_cast<uint64_t>(std::get<int64_t>(*init.node.FindAttr("seed")))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    uint64_t run = runs_.fetch_add(1, std::memory_order_relaxed);
    uint64_t key = Mix(seed_ ^ Mix(run + 0x9e3779b97f4a7c15ULL));
    // Keep an element when its 53 random bits fall at or above rate.
    auto threshold = static_cast<uint64_t>(rate_ * 9007199254740992.0);
    return DispatchFloat(x.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * mask, ctx.AllocateOutput(1, x.dtype(), x.shape()));
      ASSIGN_OR_RETURN(Tensor * y, ctx.AllocateOutput(0, x.dtype(), x.shape()));
      T scale = static_cast<T>(1.0 / (1.0 - rate_));
      const T* px = x.data<T>();
      T* pm = mask->data<T>();
      T* py = y->data<T>();
      for (int64_t i = 0, n = x.num_elements(); i < n; ++i) {
        bool keep = (Mix(key + static_cast<uint64_t>(i)) >> 11) >= threshold;
        pm[i] = keep ? scale : T(0);
        py[i] = px[i] * pm[i];
      }
      return Status::OK();
    });
  }

 private:
  double rate_;
  uint64_t seed_;
  std::atomic<uint64_t> runs_{0};
};

}  // namespace

// _LayerNorm (rewrite/subgraph_fusion.h): each row of the last axis normalised by its mean and
// (biased) variance, then scaled and shifted: two passes over a row in cache instead of the
// nine element-wise and reduction ops it replaces. Rows run in parallel.
class LayerNormKernel : public OpKernel {
 public:
  explicit LayerNormKernel(const KernelInit& init)
      : epsilon_(static_cast<float>(std::get<double>(*init.node.FindAttr("epsilon")))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    const Tensor& bias = ctx.input(2);
    const Shape& xs = x.shape();
    if (xs.rank() < 1) return InvalidArgument("input {} has no axis to normalise", xs);
    const int64_t k = xs[xs.rank() - 1];
    if (scale.num_elements() != k || bias.num_elements() != k) {
      return InvalidArgument("scale {} and bias {} must hold {} values (the last axis of {})",
                             scale.shape(), bias.shape(), k, xs);
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, DType::kF32, xs));
    if (out->num_elements() == 0) return Status::OK();
    const float* px = x.data<float>();
    const float* g = scale.data<float>();
    const float* b = bias.data<float>();
    float* py = out->data<float>();
    const int64_t rows = x.num_elements() / k;
    const float inv_k = 1.f / static_cast<float>(k);
    ParallelFor(rows, std::max<int64_t>(1, kParallelGrain / k), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* row = px + r * k;
        float* y = py + r * k;
        // Vector lanes sum in any order (the decomposed ops' reductions do too).
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < k; ++j) sum += row[j];
        const float mean = sum * inv_k;
        float sq = 0;
#pragma omp simd reduction(+ : sq)
        for (int64_t j = 0; j < k; ++j) sq += (row[j] - mean) * (row[j] - mean);
        const float inv = 1.f / std::sqrt(sq * inv_k + epsilon_);
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) y[j] = (row[j] - mean) * inv * g[j] + b[j];
      }
    });
    return Status::OK();
  }

 private:
  const float epsilon_;
};

Status RegisterNnKernels() {
  RETURN_IF_ERROR(RegisterKernel<LayerNormKernel>("_LayerNorm", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<DropoutKernel>("Dropout", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<SoftmaxKernel<false>>("Softmax", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<SoftmaxKernel<true>>("LogSoftmax", "CPU"));
  RETURN_IF_ERROR(
      RegisterKernel<SparseCrossEntropyKernel>("SparseSoftmaxCrossEntropyWithLogits", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
