// CPU kernels of the array ops: Placeholder, Const, Identity, NoOp, Reshape.
#include "ops/cpu/cpu_kernels.h"

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

}  // namespace

Status RegisterArrayKernels() {
  RETURN_IF_ERROR(RegisterKernel<PlaceholderKernel>("Placeholder", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ConstKernel>("Const", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<IdentityKernel>("Identity", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<NoOpKernel>("NoOp", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReshapeKernel>("Reshape", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
