// CPU kernels of the array ops: Placeholder, Const, Identity, NoOp, Reshape, Fill, Empty.
#include <cstring>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"

namespace dflow::cpu {
namespace {

// The executor stores a fed value in the placeholder's output slot before the run.
class PlaceholderKernel : public OpKernel {
 public:
  explicit PlaceholderKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    if (!ctx.output(0).valid()) return FailedPrecondition("placeholder was not fed");
    return Status::OK();
  }
};

class ConstKernel : public OpKernel {
 public:
  explicit ConstKernel(const KernelInit& init)
      : value_(std::get<Tensor>(*init.node.FindAttr("value"))) {}
  Status Compute(KernelContext& ctx) override {
    ctx.set_output(0, value_);
    return Status::OK();
  }

 private:
  Tensor value_;
};

class IdentityKernel : public OpKernel {
 public:
  explicit IdentityKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    ctx.set_output(0, ctx.input(0));
    return Status::OK();
  }
};

class NoOpKernel : public OpKernel {
 public:
  explicit NoOpKernel(const KernelInit&) {}
  Status Compute(KernelContext&) override { return Status::OK(); }
};

class ReshapeKernel : public OpKernel {
 public:
  explicit ReshapeKernel(const KernelInit& init)
      : dims_(std::get<std::vector<int64_t>>(*init.node.FindAttr("shape"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> dims = dims_;
    int64_t known = 1;
    int unknown = -1;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] < 0) {
        unknown = static_cast<int>(i);
      } else {
        known *= dims[i];
      }
    }
    int64_t n = x.num_elements();
    if (unknown >= 0 && known > 0 && n % known == 0) dims[unknown] = n / known;
    Shape out(dims);
    if (out.num_elements() != n) {
      return InvalidArgument("cannot reshape {} ({} elements) into {}", x.shape(), n, Shape(dims_));
    }
    ctx.set_output(0, x.Reshaped(out));
    return Status::OK();
  }

 private:
  std::vector<int64_t> dims_;
};

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

class ReshapeLikeKernel : public OpKernel {
 public:
  explicit ReshapeLikeKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& like = ctx.input(1).shape();
    if (x.num_elements() != like.num_elements()) {
      return InvalidArgument("cannot reshape {} into {}", x.shape(), like);
    }
    ctx.set_output(0, x.Reshaped(like));
    return Status::OK();
  }
};

}  // namespace

Status RegisterArrayKernels() {
  RETURN_IF_ERROR(RegisterKernel<PlaceholderKernel>("Placeholder", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ConstKernel>("Const", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<IdentityKernel>("Identity", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<NoOpKernel>("NoOp", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReshapeKernel>("Reshape", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<FillKernel<0>>("ZerosLike", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<FillKernel<1>>("OnesLike", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<FillKernel<-1>>("Fill", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<EmptyKernel>("Empty", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<AddNKernel>("AddN", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReshapeLikeKernel>("ReshapeLike", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
