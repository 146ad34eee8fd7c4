// CPU kernels of the array ops that write tensors: Fill, ZerosLike, OnesLike, Empty, AddN.
// (Placeholder, Const, Identity, NoOp, Reshape and ReshapeLike are shared: ops/common/.)
#include <cstring>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"

namespace dflow::cpu {
namespace {

// A tensor of an attribute shape, its contents left as allocated (Empty).
class EmptyKernel : public OpKernel {
 public:
  explicit EmptyKernel(const KernelInit& init)
      : shape_(std::get<Shape>(*init.node.FindAttr("shape"))),
        dtype_(std::get<DType>(*init.node.FindAttr("dtype"))) {}
  Status Compute(KernelContext& ctx) override {
    return ctx.AllocateOutput(0, dtype_, shape_).status();
  }

 private:
  Shape shape_;
  DType dtype_;
};

// A tensor of the input's shape and dtype (ZerosLike, OnesLike) or of an attribute shape (Fill),
// every element `value`.
template <int kFromInput>
class FillKernel : public OpKernel {
 public:
  explicit FillKernel(const KernelInit& init) {
    if constexpr (kFromInput < 0) {
      value_ = std::get<double>(*init.node.FindAttr("value"));
      shape_ = std::get<Shape>(*init.node.FindAttr("shape"));
      dtype_ = std::get<DType>(*init.node.FindAttr("dtype"));
    } else {
      value_ = kFromInput;
    }
  }
  Status Compute(KernelContext& ctx) override {
    DType dtype = kFromInput < 0 ? dtype_ : ctx.input(0).dtype();
    const Shape& shape = kFromInput < 0 ? shape_ : ctx.input(0).shape();
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dtype, shape));
    return DispatchAll(dtype, [&]<typename T>() -> Status {
      T v = static_cast<T>(value_);
      for (T& x : out->flat<T>()) x = v;
      return Status::OK();
    });
  }

 private:
  double value_ = 0;
  Shape shape_;
  DType dtype_ = DType::kInvalid;
};

class AddNKernel : public OpKernel {
 public:
  explicit AddNKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& first = ctx.input(0);
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).shape() != first.shape()) {
        return InvalidArgument("input {} has shape {} but input 0 has shape {}", i,
                               ctx.input(i).shape(), first.shape());
      }
    }
    return DispatchNumeric(first.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out,
                       ctx.ForwardOrAllocateOutput(0, 0, first.dtype(), first.shape()));
      T* po = out->data<T>();
      int64_t n = first.num_elements();
      if (po != first.data<T>()) std::memcpy(po, first.raw_data(), first.num_bytes());
      for (int i = 1; i < ctx.num_inputs(); ++i) {
        const T* pi = ctx.input(i).data<T>();
        for (int64_t j = 0; j < n; ++j) po[j] += pi[j];
      }
      return Status::OK();
    });
  }
};

}  // namespace

Status RegisterArrayKernels() {
  RETURN_IF_ERROR(RegisterKernel<FillKernel<0>>("ZerosLike", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<FillKernel<1>>("OnesLike", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<FillKernel<-1>>("Fill", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<EmptyKernel>("Empty", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<AddNKernel>("AddN", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
