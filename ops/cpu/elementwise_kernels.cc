// CPU kernels of the element-wise binary ops (arithmetic and comparisons, with NumPy
// broadcasting), Select and BiasAdd. Arithmetic writes in place into an input's buffer when this
// node is its last reader.
#include "ops/common/elementwise_kernels.h"

#include <cmath>
#include <type_traits>

#include "ops/cpu/broadcast_loop.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/nan_aware.h"
#include "ops/cpu/parallel.h"

namespace dflow::cpu {
namespace {

struct AddF {
  template <typename T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct SubF {
  template <typename T>
  T operator()(T a, T b) const {
    return a - b;
  }
};
struct MulF {
  template <typename T>
  T operator()(T a, T b) const {
    return a * b;
  }
};
struct DivF {
  template <typename T>
  T operator()(T a, T b) const {
    return a / b;
  }
};
struct MaxF {
  template <typename T>
  T operator()(T a, T b) const {
    return NanMax(a, b);
  }
};
struct MinF {
  template <typename T>
  T operator()(T a, T b) const {
    return NanMin(a, b);
  }
};
struct PowF {
  template <typename T>
  T operator()(T a, T b) const {
    return static_cast<T>(std::pow(a, b));
  }
};
struct EqF {
  template <typename T>
  bool operator()(T a, T b) const {
    return a == b;
  }
};
struct NeF {
  template <typename T>
  bool operator()(T a, T b) const {
    return a != b;
  }
};
struct LtF {
  template <typename T>
  bool operator()(T a, T b) const {
    return a < b;
  }
};
struct LeF {
  template <typename T>
  bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct GtF {
  template <typename T>
  bool operator()(T a, T b) const {
    return a > b;
  }
};
struct GeF {
  template <typename T>
  bool operator()(T a, T b) const {
    return a >= b;
  }
};

template <typename F>
class BinaryKernel : public common::BinaryBase<BinaryKernel<F>> {
 public:
  using common::BinaryBase<BinaryKernel>::BinaryBase;
  Status Run(KernelContext& ctx, const Tensor& a, const Tensor& b, const Shape& shape) {
    return DispatchNumeric(a.dtype(), [&]<typename T>() -> Status {
      using Out = std::invoke_result_t<F, T, T>;
      constexpr bool kSameType = std::is_same_v<Out, T>;
      if constexpr (std::is_same_v<F, DivF> && std::is_integral_v<T>) {
        for (T v : b.flat<T>()) {
          if (v == 0) return InvalidArgument("integer division by zero");
        }
      }
      DType out_dtype = DTypeOf<Out>::value;
      Tensor* out;
      if (kSameType && a.shape() == shape) {
        ASSIGN_OR_RETURN(out, ctx.ForwardOrAllocateOutput(0, 0, out_dtype, shape));
      } else if (kSameType && b.shape() == shape) {
        ASSIGN_OR_RETURN(out, ctx.ForwardOrAllocateOutput(1, 0, out_dtype, shape));
      } else {
        ASSIGN_OR_RETURN(out, ctx.AllocateOutput(0, out_dtype, shape));
      }
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      Out* po = out->data<Out>();
      F f;
      int64_t n = shape.num_elements();
      if (a.shape() == b.shape()) {
        ParallelFor(n, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) po[i] = f(pa[i], pb[i]);
        });
      } else if (b.num_elements() == 1) {
        T s = pb[0];
        ParallelFor(n, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) po[i] = f(pa[i], s);
        });
      } else if (a.num_elements() == 1) {
        T s = pa[0];
        ParallelFor(n, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) po[i] = f(s, pb[i]);
        });
      } else {
        auto strides = MakeStrides<2>(shape, {&a.shape(), &b.shape()});
        BroadcastRows<2>(shape, strides,
                         [&](int64_t i, int64_t len, const std::array<int64_t, 2>& o,
                             const std::array<int64_t, 2>& step) {
                           const T* ra = pa + o[0];
                           const T* rb = pb + o[1];
                           Out* ro = po + i;
                           if (step[0] == 1 && step[1] == 0) {
                             T s = rb[0];
                             for (int64_t k = 0; k < len; ++k) ro[k] = f(ra[k], s);
                           } else if (step[0] == 0 && step[1] == 1) {
                             T s = ra[0];
                             for (int64_t k = 0; k < len; ++k) ro[k] = f(s, rb[k]);
                           } else {
                             for (int64_t k = 0; k < len; ++k) {
                               ro[k] = f(ra[k * step[0]], rb[k * step[1]]);
                             }
                           }
                         });
      }
      return Status::OK();
    });
  }
};

class SelectKernel : public common::SelectBase<SelectKernel> {
 public:
  using SelectBase::SelectBase;
  Status Run(KernelContext& ctx, const Tensor& c, const Tensor& a, const Tensor& b,
             const Shape& shape) {
    return DispatchAll(a.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, a.dtype(), shape));
      const bool* pc = c.data<bool>();
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* po = out->data<T>();
      auto strides = MakeStrides<3>(shape, {&c.shape(), &a.shape(), &b.shape()});
      BroadcastLoop<3>(shape, strides, [&](int64_t i, const std::array<int64_t, 3>& o) {
        po[i] = pc[o[0]] ? pa[o[1]] : pb[o[2]];
      });
      return Status::OK();
    });
  }
};

class BiasAddKernel : public common::BiasAddBase<BiasAddKernel> {
 public:
  using BiasAddBase::BiasAddBase;
  Status Run(KernelContext& ctx, const Tensor& x, const Tensor& bias) {
    return DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
      const T* px = x.data<T>();
      const T* pb = bias.data<T>();
      T* po = out->data<T>();
      int64_t c = bias.num_elements(), rows = c == 0 ? 0 : x.num_elements() / c;
      ParallelFor(rows * c, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin / c; r * c < end; ++r) {
          int64_t j0 = std::max(begin - r * c, int64_t{0}), j1 = std::min(end - r * c, c);
          for (int64_t j = j0; j < j1; ++j) po[r * c + j] = px[r * c + j] + pb[j];
        }
      });
      return Status::OK();
    });
  }
};

}  // namespace

Status RegisterElementwiseKernels() {
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<AddF>>("Add", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<SubF>>("Sub", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<MulF>>("Mul", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<DivF>>("Div", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<MaxF>>("Maximum", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<MinF>>("Minimum", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<PowF>>("Pow", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<EqF>>("Equal", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<NeF>>("NotEqual", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<LtF>>("Less", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<LeF>>("LessEqual", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<GtF>>("Greater", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<GeF>>("GreaterEqual", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<SelectKernel>("Select", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BiasAddKernel>("BiasAdd", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
