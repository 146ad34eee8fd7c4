// CPU kernels of Variable, Assign and ApplySGD. A variable's value lives in the device's
// VariableStore. Updates write in place when nobody but the store and the updating node's own
// input holds the buffer, and into a fresh buffer otherwise, so a reader never sees a
// half-written value and a fetched value is a snapshot.
#include <cstring>

#include "ops/cpu/cpu_kernels.h"

namespace dflow::cpu {
namespace {

// True when `cur` (the stored value) may be overwritten by the node reading it as input 0.
bool CanUpdateInPlace(const KernelContext& ctx, const Tensor& cur) {
  if (!cur.valid()) return false;
  if (cur.buffer_unique()) return true;
  return cur.SharesBufferWith(ctx.input(0)) && cur.buffer_refs() == 2 && ctx.IsLastUse(0);
}

class VariableKernel : public OpKernel {
 public:
  explicit VariableKernel(const KernelInit& init)
      : var_(init.variables->GetOrCreate(init.node.name())) {}
  // Outputs the current value, or nothing when uninitialised: the executor then tells the
  // reading node that the variable is uninitialised (Assign alone may take it so).
  Status Compute(KernelContext& ctx) override {
    std::lock_guard lock(var_->mu);
    ctx.set_output(0, var_->value);
    return Status::OK();
  }

 private:
  VariableStore::Variable* var_;
};

class AssignKernel : public OpKernel {
 public:
  explicit AssignKernel(const KernelInit& init)
      : name_(init.graph.node(init.node.inputs()[0].node).name()),
        var_(init.variables->GetOrCreate(name_)),
        validate_shape_(std::get<bool>(*init.node.FindAttr("validate_shape"))),
        declared_(init.graph.node(init.node.inputs()[0].node).output_shape(0)) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& value = ctx.input(1);
    if (validate_shape_ && value.shape() != declared_) {
      return InvalidArgument("cannot assign a value of shape {} to variable '{}' of shape {}",
                             value.shape(), name_, declared_);
    }
    std::lock_guard lock(var_->mu);
    Tensor& cur = var_->value;
    if (!(CanUpdateInPlace(ctx, cur) && cur.dtype() == value.dtype() &&
          cur.shape() == value.shape())) {
      ASSIGN_OR_RETURN(cur, Tensor::Allocate(ctx.allocator(), value.dtype(), value.shape()));
    }
    if (value.num_bytes() > 0) std::memcpy(cur.raw_data(), value.raw_data(), value.num_bytes());
    ctx.set_output(0, cur);
    return Status::OK();
  }

 private:
  std::string name_;
  VariableStore::Variable* var_;
  bool validate_shape_;
  Shape declared_;
};

class ApplySGDKernel : public OpKernel {
 public:
  explicit ApplySGDKernel(const KernelInit& init)
      : name_(init.graph.node(init.node.inputs()[0].node).name()),
        var_(init.variables->GetOrCreate(name_)) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& lr = ctx.input(1);
    const Tensor& grad = ctx.input(2);
    std::lock_guard lock(var_->mu);
    Tensor& cur = var_->value;
    if (!cur.valid()) {
      return FailedPrecondition("variable '{}' is uninitialised: run an Assign to it first", name_);
    }
    if (grad.shape() != cur.shape() || grad.dtype() != cur.dtype()) {
      return InvalidArgument("gradient {}{} does not match variable '{}' {}{}", grad.dtype(),
                             grad.shape(), name_, cur.dtype(), cur.shape());
    }
    if (lr.num_elements() != 1) return InvalidArgument("learning rate must be a scalar");
    Tensor dst = cur;
    if (!CanUpdateInPlace(ctx, cur)) {
      ASSIGN_OR_RETURN(dst, Tensor::Allocate(ctx.allocator(), cur.dtype(), cur.shape()));
    }
    auto update = [&]<typename T>() {
      T rate = lr.data<T>()[0];
      const T* src = cur.data<T>();
      const T* g = grad.data<T>();
      T* out = dst.data<T>();
      for (int64_t i = 0, n = cur.num_elements(); i < n; ++i) out[i] = src[i] - rate * g[i];
    };
    if (cur.dtype() == DType::kF32) {
      update.template operator()<float>();
    } else {
      update.template operator()<double>();
    }
    cur = dst;
    ctx.set_output(0, cur);
    return Status::OK();
  }

 private:
  std::string name_;
  VariableStore::Variable* var_;
};

}  // namespace

Status RegisterStateKernels() {
  RETURN_IF_ERROR(RegisterKernel<VariableKernel>("Variable", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<AssignKernel>("Assign", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplySGDKernel>("ApplySGD", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
