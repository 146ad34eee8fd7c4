// CPU kernels of the array ops that write tensors: Fill, ZerosLike, OnesLike, Empty, AddN,
// ElementCount.
// (Placeholder, Const, Identity, NoOp, Reshape and ReshapeLike are shared: ops/common/.)
#include "ops/common/array_kernels.h"

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
class FillKernel : public common::FillBase<FillKernel<kFromInput>, kFromInput> {
 public:
  using common::FillBase<FillKernel, kFromInput>::FillBase;
  Status Run(KernelContext&, Tensor& out) {
    return DispatchAll(out.dtype(), [&]<typename T>() -> Status {
      T v = static_cast<T>(this->value());
      for (T& x : out.flat<T>()) x = v;
      return Status::OK();
    });
  }
};

class ElementCountKernel : public common::ElementCountBase<ElementCountKernel> {
 public:
  using ElementCountBase::ElementCountBase;
  Status Run(KernelContext&, Tensor& out, int64_t count) {
    return DispatchNumeric(out.dtype(), [&]<typename T>() -> Status {
      out.data<T>()[0] = static_cast<T>(count);
      return Status::OK();
    });
  }
};

class AddNKernel : public common::AddNBase<AddNKernel> {
 public:
  using AddNBase::AddNBase;
  Status Run(KernelContext& ctx, const Tensor& first) {
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
  RETURN_IF_ERROR(RegisterKernel<ElementCountKernel>("ElementCount", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
