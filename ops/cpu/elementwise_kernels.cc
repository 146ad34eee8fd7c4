// CPU kernels of the element-wise ops: binary arithmetic with NumPy broadcasting, Relu, BiasAdd.
// Each writes in place into its input's buffer when it is that buffer's last reader.
#include <algorithm>
#include <cstring>

#include "ops/broadcast.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"

namespace dflow::cpu {
namespace {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMaximum };

template <BinaryOp op, typename T>
inline T Apply(T a, T b) {
  if constexpr (op == BinaryOp::kAdd) return a + b;
  if constexpr (op == BinaryOp::kSub) return a - b;
  if constexpr (op == BinaryOp::kMul) return a * b;
  if constexpr (op == BinaryOp::kDiv) return a / b;
  if constexpr (op == BinaryOp::kMaximum) return a > b ? a : b;
}

template <BinaryOp op, typename T>
void Loop(const T* a, const T* b, T* out, const Shape& shape, const int64_t* sa,
          const int64_t* sb) {
  int rank = shape.rank();
  int64_t n = shape.num_elements();
  if (n == 0) return;
  if (rank == 0) {
    out[0] = Apply<op>(a[0], b[0]);
    return;
  }
  // Walk the outer dimensions with a counter; run the last one as a strided inner loop.
  int64_t inner = shape[rank - 1], ia = sa[rank - 1], ib = sb[rank - 1];
  std::array<int64_t, Shape::kMaxRank> idx{};
  int64_t oa = 0, ob = 0;
  for (int64_t base = 0; base < n; base += inner) {
    for (int64_t i = 0; i < inner; ++i) out[base + i] = Apply<op>(a[oa + i * ia], b[ob + i * ib]);
    for (int d = rank - 2; d >= 0; --d) {
      oa += sa[d];
      ob += sb[d];
      if (++idx[d] < shape[d]) break;
      oa -= sa[d] * shape[d];
      ob -= sb[d] * shape[d];
      idx[d] = 0;
    }
  }
}

template <BinaryOp op>
class BinaryKernel : public OpKernel {
 public:
  explicit BinaryKernel(const KernelInit&) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != b.dtype())
      return InvalidArgument("dtypes differ: {} vs {}", a.dtype(), b.dtype());
    ASSIGN_OR_RETURN(Shape shape, BroadcastShape(a.shape(), b.shape()));
    return DispatchNumeric(a.dtype(), [&]<typename T>() -> Status {
      if constexpr (op == BinaryOp::kDiv && std::is_integral_v<T>) {
        for (T v : b.flat<T>()) {
          if (v == 0) return InvalidArgument("integer division by zero");
        }
      }
      Tensor* out;
      if (a.shape() == shape) {
        ASSIGN_OR_RETURN(out, ctx.ForwardOrAllocateOutput(0, 0, a.dtype(), shape));
      } else if (b.shape() == shape) {
        ASSIGN_OR_RETURN(out, ctx.ForwardOrAllocateOutput(1, 0, a.dtype(), shape));
      } else {
        ASSIGN_OR_RETURN(out, ctx.AllocateOutput(0, a.dtype(), shape));
      }
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* po = out->data<T>();
      int64_t n = shape.num_elements();
      if (a.shape() == b.shape()) {
        for (int64_t i = 0; i < n; ++i) po[i] = Apply<op>(pa[i], pb[i]);
      } else if (b.num_elements() == 1) {
        T s = pb[0];
        for (int64_t i = 0; i < n; ++i) po[i] = Apply<op>(pa[i], s);
      } else if (a.num_elements() == 1) {
        T s = pa[0];
        for (int64_t i = 0; i < n; ++i) po[i] = Apply<op>(s, pb[i]);
      } else {
        std::array<int64_t, Shape::kMaxRank> sa{}, sb{};
        BroadcastStrides(a.shape(), shape, sa.data());
        BroadcastStrides(b.shape(), shape, sb.data());
        Loop<op, T>(pa, pb, po, shape, sa.data(), sb.data());
      }
      return Status::OK();
    });
  }
};

class ReluKernel : public OpKernel {
 public:
  explicit ReluKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    return DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
      const T* px = x.data<T>();
      T* po = out->data<T>();
      for (int64_t i = 0, n = x.num_elements(); i < n; ++i) po[i] = px[i] > T(0) ? px[i] : T(0);
      return Status::OK();
    });
  }
};

class BiasAddKernel : public OpKernel {
 public:
  explicit BiasAddKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& bias = ctx.input(1);
    if (x.shape().rank() < 1 || bias.shape().rank() != 1 ||
        x.shape()[x.shape().rank() - 1] != bias.shape()[0]) {
      return InvalidArgument("bias of shape {} does not match the last dimension of input {}",
                             bias.shape(), x.shape());
    }
    return DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
      const T* px = x.data<T>();
      const T* pb = bias.data<T>();
      T* po = out->data<T>();
      int64_t c = bias.num_elements(), rows = c == 0 ? 0 : x.num_elements() / c;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < c; ++j) po[r * c + j] = px[r * c + j] + pb[j];
      }
      return Status::OK();
    });
  }
};

}  // namespace

Status RegisterElementwiseKernels() {
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kAdd>>("Add", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kSub>>("Sub", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kMul>>("Mul", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kDiv>>("Div", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kMaximum>>("Maximum", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReluKernel>("Relu", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BiasAddKernel>("BiasAdd", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
