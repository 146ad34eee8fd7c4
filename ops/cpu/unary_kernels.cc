// CPU kernels of the element-wise unary ops, Cast, and the activation gradients. Each writes in
// place when it is the last reader of an unshared input. f32 unary ops run on oneDNN's eltwise
// primitive where it has them; f64, integers and the rest run on loops.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

#include "ops/common/elementwise_kernels.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/dnnl_context.h"
#include "ops/cpu/half.h"
#include "ops/cpu/nan_aware.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/primitive_cache.h"

namespace dflow::cpu {
namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

struct NegF {
  template <typename T>
  T operator()(T x) const {
    return -x;
  }
};
struct ExpF {
  template <typename T>
  T operator()(T x) const {
    return std::exp(x);
  }
};
struct LogF {
  template <typename T>
  T operator()(T x) const {
    return std::log(x);
  }
};
struct SqrtF {
  template <typename T>
  T operator()(T x) const {
    return std::sqrt(x);
  }
};
struct RsqrtF {
  template <typename T>
  T operator()(T x) const {
    return T(1) / std::sqrt(x);
  }
};
struct SquareF {
  template <typename T>
  T operator()(T x) const {
    return x * x;
  }
};
struct ReluF {
  template <typename T>
  T operator()(T x) const {
    return (x > T(0) || x != x) ? x : T(0);  // NaN stays NaN
  }
};
struct SigmoidF {
  template <typename T>
  T operator()(T x) const {
    return T(1) / (T(1) + std::exp(-x));
  }
};
struct TanhF {
  template <typename T>
  T operator()(T x) const {
    return std::tanh(x);
  }
};
struct GeluF {
  template <typename T>
  T operator()(T x) const {
    return static_cast<T>(0.5 * x * (1 + std::erf(x * kSqrtHalf)));
  }
};
struct AbsF {
  template <typename T>
  T operator()(T x) const {
    return x < T(0) ? T(-x) : x;
  }
};
struct SignF {
  template <typename T>
  T operator()(T x) const {
    return x != x ? x : static_cast<T>((T(0) < x) - (x < T(0)));
  }
};
struct FloorF {
  template <typename T>
  T operator()(T x) const {
    return std::floor(x);
  }
};
struct CeilF {
  template <typename T>
  T operator()(T x) const {
    return std::ceil(x);
  }
};
struct RoundF {
  template <typename T>
  T operator()(T x) const {
    return std::nearbyint(x);
  }
};
struct SinF {
  template <typename T>
  T operator()(T x) const {
    return std::sin(x);
  }
};
struct CosF {
  template <typename T>
  T operator()(T x) const {
    return std::cos(x);
  }
};
struct TanF {
  template <typename T>
  T operator()(T x) const {
    return std::tan(x);
  }
};
struct AsinF {
  template <typename T>
  T operator()(T x) const {
    return std::asin(x);
  }
};
struct AcosF {
  template <typename T>
  T operator()(T x) const {
    return std::acos(x);
  }
};
struct AtanF {
  template <typename T>
  T operator()(T x) const {
    return std::atan(x);
  }
};
struct SinhF {
  template <typename T>
  T operator()(T x) const {
    return std::sinh(x);
  }
};
struct CoshF {
  template <typename T>
  T operator()(T x) const {
    return std::cosh(x);
  }
};
struct AsinhF {
  template <typename T>
  T operator()(T x) const {
    return std::asinh(x);
  }
};
struct AcoshF {
  template <typename T>
  T operator()(T x) const {
    return std::acosh(x);
  }
};
struct AtanhF {
  template <typename T>
  T operator()(T x) const {
    return std::atanh(x);
  }
};
struct ErfF {
  template <typename T>
  T operator()(T x) const {
    return std::erf(x);
  }
};
struct LeakyReluF {
  double alpha;
  template <typename T>
  T operator()(T x) const {
    return (x > T(0) || x != x) ? x : static_cast<T>(alpha * x);
  }
};

// The oneDNN eltwise algorithm computing f, with its alpha and beta.
struct Eltwise {
  dnnl::algorithm alg;
  float alpha = 0, beta = 0;
};
template <typename F>
std::optional<Eltwise> EltwiseOf(const F& f) {
  using A = dnnl::algorithm;
  if constexpr (std::is_same_v<F, NegF>) return Eltwise{A::eltwise_linear, -1, 0};
  if constexpr (std::is_same_v<F, ExpF>) return Eltwise{A::eltwise_exp};
  // Not Log: oneDNN's approximation gives log(1) = -1.4e-6, where the ONNX backend tests (and
  // std::log) give 0.
  if constexpr (std::is_same_v<F, SqrtF>) return Eltwise{A::eltwise_sqrt};
  if constexpr (std::is_same_v<F, RsqrtF>) return Eltwise{A::eltwise_pow, 1, -0.5f};
  if constexpr (std::is_same_v<F, SquareF>) return Eltwise{A::eltwise_square};
  if constexpr (std::is_same_v<F, SigmoidF>) return Eltwise{A::eltwise_logistic};
  if constexpr (std::is_same_v<F, TanhF>) return Eltwise{A::eltwise_tanh};
  if constexpr (std::is_same_v<F, GeluF>) return Eltwise{A::eltwise_gelu_erf};
  return std::nullopt;
}

// y = f(x) over n floats on oneDNN's eltwise primitive (x == y is fine).
void RunEltwise(const Eltwise& e, int64_t n, const void* x, void* y) {
  struct Prim {
    dnnl::eltwise_forward prim;
    dnnl::memory::desc data;
  };
  std::string key = fmt::format("eltwise:{}:{}:{}:{}", static_cast<int>(e.alg), e.alpha, e.beta, n);
  auto p = PrimitiveCache::Global().GetOrCreate<Prim>(key, [&] {
    dnnl::memory::desc data({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
    dnnl::eltwise_forward::primitive_desc pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, e.alg, data, e.alpha,
                                    e.beta),
        CpuEngine());
    return std::make_shared<const Prim>(Prim{dnnl::eltwise_forward(pd), data});
  });
  const auto& engine = CpuEngine();
  dnnl::memory xm(p->data, engine, const_cast<void*>(x)), ym(p->data, engine, y);
  dnnl::stream& s = ThreadStream();
  p->prim.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DST, ym}});
  s.wait();
}

// Runs f over every element of input 0.
template <typename F>
class UnaryKernel : public OpKernel {
 public:
  explicit UnaryKernel(const KernelInit& init) {
    if constexpr (std::is_same_v<F, LeakyReluF>) {
      f_.alpha = std::get<double>(*init.node.FindAttr("alpha"));
    }
  }
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    // oneDNN's approximations give wrong answers for NaN and infinities (exp(NaN) = inf,
    // pow(-inf, -0.5) = 0): inputs with one take the loops, which give the IEEE results. Its GELU
    // gives them as the loop does (NaN for NaN and -inf, inf for inf, on AVX-512, AVX2 and
    // SSE4.1 alike), so a GELU's input needs no check.
    if (auto e = EltwiseOf(f_);
        e && x.dtype() == DType::kF32 &&
        (std::is_same_v<F, GeluF> || AllFiniteParallel(x.data<float>(), x.num_elements()))) {
      ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
      if (x.num_elements() > 0) RunEltwise(*e, x.num_elements(), x.raw_data(), out->raw_data());
      return Status::OK();
    }
    return DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
      const T* px = x.data<T>();
      T* po = out->data<T>();
      ParallelFor(x.num_elements(), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) po[i] = f_(px[i]);
      });
      return Status::OK();
    });
  }

 private:
  F f_{};
};

// Activation gradients: out = grad(g, x), element-wise over same-shaped g and x.
struct ReluGradF {
  template <typename T>
  T operator()(T g, T x) const {
    return x > T(0) ? g : T(0);
  }
};
struct LeakyReluGradF {
  double alpha;
  template <typename T>
  T operator()(T g, T x) const {
    return x > T(0) ? g : static_cast<T>(alpha * g);
  }
};
struct GeluGradF {
  template <typename T>
  T operator()(T g, T x) const {
    double cdf = 0.5 * (1 + std::erf(x * kSqrtHalf));
    double pdf = kInvSqrt2Pi * std::exp(-0.5 * x * x);
    return static_cast<T>(g * (cdf + x * pdf));
  }
};

template <typename F>
class ActivationGradKernel : public common::ActivationGradBase<ActivationGradKernel<F>> {
 public:
  explicit ActivationGradKernel(const KernelInit& init)
      : common::ActivationGradBase<ActivationGradKernel<F>>(init) {
    if constexpr (std::is_same_v<F, LeakyReluGradF>) {
      f_.alpha = std::get<double>(*init.node.FindAttr("alpha"));
    }
  }
  Status Run(KernelContext& ctx, const Tensor& g, const Tensor& x) {
    return DispatchNumeric(g.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, g.dtype(), g.shape()));
      const T* pg = g.data<T>();
      const T* px = x.data<T>();
      T* po = out->data<T>();
      ParallelFor(g.num_elements(), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) po[i] = f_(pg[i], px[i]);
      });
      return Status::OK();
    });
  }

 private:
  F f_{};
};

bool IsHalf(DType t) { return t == DType::kF16 || t == DType::kBF16; }

class CastKernel : public common::CastBase<CastKernel> {
 public:
  using CastBase::CastBase;
  Status Run(KernelContext& ctx, const Tensor& x, DType dst) {
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dst, x.shape()));
    if (IsHalf(x.dtype()) || IsHalf(dst)) return CastHalf(x, dst, *out);
    return DispatchAll(x.dtype(), [&]<typename S>() -> Status {
      return DispatchAll(dst, [&]<typename D>() -> Status {
        const S* px = x.data<S>();
        D* po = out->data<D>();
        for (int64_t i = 0, n = x.num_elements(); i < n; ++i) {
          if constexpr (std::is_same_v<D, bool>) {
            po[i] = px[i] != S(0);
          } else {
            po[i] = static_cast<D>(px[i]);
          }
        }
        return Status::OK();
      });
    });
  }

 private:
  // To or from f16 / bf16, through f32 (f64 and the integers rounded to f32 first).
  static Status CastHalf(const Tensor& x, DType dst_, Tensor& out) {
    const int64_t n = x.num_elements();
    if (IsHalf(x.dtype())) {
      const auto* px = static_cast<const uint16_t*>(x.raw_data());
      if (IsHalf(dst_)) {
        auto* po = static_cast<uint16_t*>(out.raw_data());
        for (int64_t i = 0; i < n; ++i) po[i] = FloatToHalf(dst_, HalfToFloat(x.dtype(), px[i]));
        return Status::OK();
      }
      if (dst_ == DType::kF32) {
        HalfToFloat(x.dtype(), px, out.data<float>(), n);
        return Status::OK();
      }
      return DispatchAll(dst_, [&]<typename D>() -> Status {
        D* po = out.data<D>();
        for (int64_t i = 0; i < n; ++i) {
          const float v = HalfToFloat(x.dtype(), px[i]);
          if constexpr (std::is_same_v<D, bool>) {
            po[i] = v != 0;
          } else {
            po[i] = static_cast<D>(v);
          }
        }
        return Status::OK();
      });
    }
    auto* po = static_cast<uint16_t*>(out.raw_data());
    if (x.dtype() == DType::kF32) {  // the mixed-precision rewrite's casts: in parallel
      FloatToHalf(dst_, x.data<float>(), po, n);
      return Status::OK();
    }
    return DispatchAll(x.dtype(), [&]<typename S>() -> Status {
      const S* px = x.data<S>();
      for (int64_t i = 0; i < n; ++i) po[i] = FloatToHalf(dst_, static_cast<float>(px[i]));
      return Status::OK();
    });
  }
};

}  // namespace

Status RegisterUnaryKernels() {
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<NegF>>("Neg", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<ExpF>>("Exp", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<LogF>>("Log", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<SqrtF>>("Sqrt", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<RsqrtF>>("Rsqrt", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<SquareF>>("Square", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<ReluF>>("Relu", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<SigmoidF>>("Sigmoid", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<TanhF>>("Tanh", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<GeluF>>("Gelu", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<LeakyReluF>>("LeakyRelu", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<AbsF>>("Abs", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<SignF>>("Sign", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<FloorF>>("Floor", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<CeilF>>("Ceil", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<RoundF>>("Round", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<SinF>>("Sin", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<CosF>>("Cos", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<TanF>>("Tan", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<AsinF>>("Asin", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<AcosF>>("Acos", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<AtanF>>("Atan", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<SinhF>>("Sinh", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<CoshF>>("Cosh", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<AsinhF>>("Asinh", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<AcoshF>>("Acosh", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<AtanhF>>("Atanh", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<ErfF>>("Erf", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ActivationGradKernel<ReluGradF>>("ReluGrad", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ActivationGradKernel<LeakyReluGradF>>("LeakyReluGrad", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ActivationGradKernel<GeluGradF>>("GeluGrad", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<CastKernel>("Cast", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
