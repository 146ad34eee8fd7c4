// CPU kernels of the optimizer updates: ApplySGD, ApplyMomentum (with Nesterov) and ApplyAdam
// (with AdamW's decoupled weight decay). Their bases (ops/common/training_kernels.h) lock the
// variables (MutexLocks, deadlock-free across several), check them and choose where the new
// values go, in place when that is safe (variable_update.h); these compute them.
#include "ops/common/training_kernels.h"

#include <cmath>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/nan_aware.h"
#include "ops/cpu/parallel.h"

namespace dflow::cpu {
namespace {

class ApplySGDKernel : public common::MomentumBase<ApplySGDKernel, false> {
 public:
  using MomentumBase::MomentumBase;
  Status Run(KernelContext&, const Tensor& grad, const Tensor& lr, const Tensor& var, const Tensor*,
             Tensor& var_dst, Tensor*) {
    return DispatchFloat(var.dtype(), [&]<typename T>() -> Status {
      T rate = lr.data<T>()[0];
      const T* src = var.data<T>();
      const T* g = grad.data<T>();
      T* out = var_dst.data<T>();
      ParallelFor(var.num_elements(), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = src[i] - rate * g[i];
      });
      return Status::OK();
    });
  }
};

class ApplyMomentumKernel : public common::MomentumBase<ApplyMomentumKernel, true> {
 public:
  using MomentumBase::MomentumBase;
  Status Run(KernelContext&, const Tensor& grad, const Tensor& lr, const Tensor& var,
             const Tensor* accum, Tensor& var_dst, Tensor* accum_dst) {
    return DispatchFloat(var.dtype(), [&]<typename T>() -> Status {
      T rate = lr.data<T>()[0], mu = static_cast<T>(momentum_);
      const T* g = grad.data<T>();
      const T* w = var.data<T>();
      const T* a = accum->data<T>();
      T* w_out = var_dst.data<T>();
      T* a_out = accum_dst->data<T>();
      bool nesterov = nesterov_;
      ParallelFor(var.num_elements(), [=](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          T next = mu * a[i] + g[i];
          w_out[i] = w[i] - rate * (nesterov ? g[i] + mu * next : next);
          a_out[i] = next;
        }
      });
      return Status::OK();
    });
  }
};

// One Adam step over elements [begin, end). Element i reads and writes only element i (an
// output may be its input's buffer), so the loop vectorises; with -fno-math-errno (see
// CMakeLists.txt) std::sqrt is one instruction. A function of its own: inlined into the large
// Compute, GCC once kept it scalar with a libm call per element (2x slower).
template <typename T>
struct AdamBuffers {
  const T *g, *w, *m, *v;
  T *w_out, *m_out, *v_out;
};
template <typename T>
struct AdamFactors {
  T b1, b2, eps, step_size, decay;
};
template <typename T>
[[gnu::noinline]] void AdamUpdate(int64_t begin, int64_t end, AdamBuffers<T> b, AdamFactors<T> f) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    T mi = f.b1 * b.m[i] + (1 - f.b1) * b.g[i];
    T vi = f.b2 * b.v[i] + (1 - f.b2) * b.g[i] * b.g[i];
    b.w_out[i] = b.w[i] - f.decay * b.w[i] - f.step_size * mi / (std::sqrt(vi) + f.eps);
    b.m_out[i] = mi;
    b.v_out[i] = vi;
  }
}

class ApplyAdamKernel : public common::AdamBase<ApplyAdamKernel> {
 public:
  using AdamBase::AdamBase;
  Status Run(KernelContext&, const Tensor& grad, const Tensor& lr, const common::AdamValues& cur,
             common::AdamTargets& dst) {
    const int64_t t = cur.step.data<int64_t>()[0] + 1;
    dst.step.data<int64_t>()[0] = t;
    const Tensor& var = cur.var;
    const Tensor& m = cur.m;
    const Tensor& v = cur.v;
    double correction =
        std::sqrt(1 - std::pow(a_.beta2, double(t))) / (1 - std::pow(a_.beta1, double(t)));
    return DispatchFloat(var.dtype(), [&]<typename T>() -> Status {
      T rate = lr.data<T>()[0];
      T b1 = static_cast<T>(a_.beta1), b2 = static_cast<T>(a_.beta2);
      T eps = static_cast<T>(a_.epsilon), step_size = static_cast<T>(rate * correction);
      T decay = static_cast<T>(rate * a_.weight_decay);
      const T* g = grad.data<T>();
      const T* w = var.data<T>();
      const T* pm = m.data<T>();
      const T* pv = v.data<T>();
      T* w_out = dst.var.data<T>();
      T* m_out = dst.m.data<T>();
      T* v_out = dst.v.data<T>();
      ParallelFor(var.num_elements(), [=](int64_t begin, int64_t end) {
        AdamUpdate<T>(begin, end, {g, w, pm, pv, w_out, m_out, v_out},
                      {b1, b2, eps, step_size, decay});
      });
      return Status::OK();
    });
  }
};

// AllFinite: whether no input holds a NaN or an infinity (the check of a step's gradients under
// dynamic loss scaling); stops at the first input that does.
class AllFiniteKernel : public OpKernel {
 public:
  explicit AllFiniteKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    bool finite = true;
    for (int i = 0; i < ctx.num_inputs() && finite; ++i) {
      const Tensor& x = ctx.input(i);
      if (x.dtype() == DType::kF32) {
        finite = AllFiniteParallel(x.data<float>(), x.num_elements());
        continue;
      }
      if (x.dtype() == DType::kF64) {
        const double* p = x.data<double>();
        for (int64_t j = 0; j < x.num_elements() && finite; ++j) finite = std::isfinite(p[j]);
        continue;
      }
      // bf16 or f16, raw bits: finite unless the exponent is all ones.
      const uint16_t exponent = x.dtype() == DType::kBF16 ? 0x7f80 : 0x7c00;
      const uint16_t* p = static_cast<const uint16_t*>(x.raw_data());
      for (int64_t j = 0; j < x.num_elements() && finite; ++j) {
        finite = (p[j] & exponent) != exponent;
      }
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, DType::kBool, Shape{}));
    out->data<bool>()[0] = finite;
    return Status::OK();
  }
};

}  // namespace

Status RegisterTrainingKernels() {
  RETURN_IF_ERROR(RegisterKernel<ApplySGDKernel>("ApplySGD", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel>("ApplyMomentum", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdam", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdamW", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplySGDKernel>("ApplySGDIf", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel>("ApplyMomentumIf", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdamIf", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdamWIf", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<AllFiniteKernel>("AllFinite", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
