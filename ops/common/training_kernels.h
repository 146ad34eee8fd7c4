// What the optimizer kernels of every device share (ops/common/kernel_base.h): ApplySGD,
// ApplyMomentum, ApplyAdam and ApplyAdamW lock their variables, check them (variable_update.h),
// choose where each new value goes and store the new values once the device's kernel has
// written them. Their gated twins (ApplySGDIf, ...: a last bool input "apply") first read the
// gate and, when it is false, leave every variable as it was without calling the kernel; or,
// for a kernel that reads the gate on the device (ReadsGateOnDevice), call it, and the kernel
// keeps the values.
#pragma once

#include "framework/device_context.h"
#include "graph/mutex.h"
#include "ops/common/kernel_base.h"
#include "ops/common/variable_update.h"

namespace dflow::common {

// The gate of a gated update (an op "<update>If"): its last input, a bool scalar.
class UpdateGate {
 public:
  explicit UpdateGate(const KernelInit& init)
      : gated_(init.node.op().ends_with("If")), context_(init.device_context) {}
  // Whether the update applies, as far as the host decides: true for an ungated update, and
  // where `device_reads` and the gate is in device memory (the device's kernel then reads
  // DeviceGate itself, so the host never waits for the stream); otherwise the gate's value,
  // copied to the host when it is in a device's memory. InvalidArgument for a gate that is not
  // one element.
  Result<bool> Applies(KernelContext& ctx, bool device_reads = false) const {
    if (!gated_) return true;
    const Tensor& apply = ctx.input(ctx.num_inputs() - 1);
    if (apply.num_elements() != 1) {
      return InvalidArgument("apply must be one bool, got {} elements", apply.num_elements());
    }
    if (apply.host_accessible()) return apply.data<bool>()[0];
    if (device_reads) return true;
    DeviceContext& device = context_ != nullptr ? *context_ : HostMemoryContext();
    ASSIGN_OR_RETURN(Tensor host, device.CopyToHost(apply));
    return host.data<bool>()[0];
  }
  // The gate for a kernel that reads it on the device (after Applies(ctx, true)): null for an
  // ungated update and a gate in host memory, which Applies decided.
  const bool* DeviceGate(KernelContext& ctx) const {
    if (!gated_) return nullptr;
    const Tensor& apply = ctx.input(ctx.num_inputs() - 1);
    return apply.host_accessible() ? nullptr : apply.data<bool>();
  }

 private:
  bool gated_;
  DeviceContext* context_;
};

// Whether Derived's kernel reads its gate on the device (a member `static constexpr bool
// kReadsGateOnDevice = true`, with DeviceGate passed to it): it keeps every value as it was when
// the gate is false, so the base neither waits for the gate nor skips the call.
template <typename Derived>
constexpr bool ReadsGateOnDevice() {
  if constexpr (requires { Derived::kReadsGateOnDevice; }) {
    return Derived::kReadsGateOnDevice;
  } else {
    return false;
  }
}

// The current values of Adam's variables, valid while their locks are held.
struct AdamValues {
  const Tensor& var;
  const Tensor& m;
  const Tensor& v;
  const Tensor& step;
};

// Where the new values of Adam's variables go: each one's current buffer when that is safe
// (UpdateTarget), else a fresh one.
struct AdamTargets {
  Tensor var, m, v, step;
};

// Derived::Run(ctx, grad, lr, cur, dst), called with the four locks held: computes from the
// current values `cur` and writes the new ones, step counter included, into `dst`.
template <typename Derived>
class AdamBase : public KernelBase<Derived> {
 public:
  explicit AdamBase(const KernelInit& init) : a_(init), gate_(init) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& lr = ctx.input(4);
    const Tensor& grad = ctx.input(5);
    ASSIGN_OR_RETURN(bool applies, gate_.Applies(ctx, ReadsGateOnDevice<Derived>()));
    MutexLocks lock(a_.var.var->mu, a_.m.var->mu, a_.v.var->mu, a_.step.var->mu);
    RETURN_IF_ERROR(CheckAdam(a_, grad, lr));
    if (!applies) {
      ctx.set_output(0, Value(a_.var));
      return Status::OK();
    }
    AdamTargets dst;
    ASSIGN_OR_RETURN(dst.var, UpdateTarget(ctx, a_.var));
    ASSIGN_OR_RETURN(dst.m, UpdateTarget(ctx, a_.m));
    ASSIGN_OR_RETURN(dst.v, UpdateTarget(ctx, a_.v));
    ASSIGN_OR_RETURN(dst.step, UpdateTarget(ctx, a_.step));
    const AdamValues cur{Value(a_.var), Value(a_.m), Value(a_.v), Value(a_.step)};
    RETURN_IF_ERROR(this->derived().Run(ctx, grad, lr, cur, dst));
    Value(a_.var) = dst.var;
    Value(a_.m) = dst.m;
    Value(a_.v) = dst.v;
    Value(a_.step) = dst.step;
    ctx.set_output(0, Value(a_.var));
    return Status::OK();
  }

 protected:
  const AdamOperands a_;
  const UpdateGate gate_;
};

// ApplySGD (kMomentum false: var, lr, grad) and ApplyMomentum (var, accum, lr, grad, with
// momentum_ and nesterov_): Derived::Run(ctx, grad, lr, var, accum, var_dst, accum_dst), called
// with the locks held, computes from the current values `var` and `accum` (null for SGD) and
// writes the new ones into `var_dst` and `accum_dst` (null for SGD).
template <typename Derived, bool kMomentum>
class MomentumBase : public KernelBase<Derived> {
 public:
  explicit MomentumBase(const KernelInit& init) : var_(LookupVariable(init, 0)), gate_(init) {
    if constexpr (kMomentum) {
      accum_ = LookupVariable(init, 1);
      momentum_ = std::get<double>(*init.node.FindAttr("momentum"));
      nesterov_ = std::get<bool>(*init.node.FindAttr("nesterov"));
    }
  }
  Status Compute(KernelContext& ctx) final {
    const Tensor& lr = ctx.input(kMomentum ? 2 : 1);
    const Tensor& grad = ctx.input(kMomentum ? 3 : 2);
    ASSIGN_OR_RETURN(bool applies, gate_.Applies(ctx, ReadsGateOnDevice<Derived>()));
    if constexpr (kMomentum) {
      MutexLocks lock(var_.var->mu, accum_.var->mu);
      RETURN_IF_ERROR(CheckInitialized(var_));
      RETURN_IF_ERROR(CheckInitialized(accum_));
      RETURN_IF_ERROR(CheckGrad(var_, grad, lr));
      RETURN_IF_ERROR(CheckGrad(accum_, grad, lr));
      if (!applies) {
        ctx.set_output(0, Value(var_));
        return Status::OK();
      }
      ASSIGN_OR_RETURN(Tensor var_dst, UpdateTarget(ctx, var_));
      ASSIGN_OR_RETURN(Tensor accum_dst, UpdateTarget(ctx, accum_));
      RETURN_IF_ERROR(
          this->derived().Run(ctx, grad, lr, Value(var_), &Value(accum_), var_dst, &accum_dst));
      Value(accum_) = accum_dst;
      Value(var_) = var_dst;
      ctx.set_output(0, Value(var_));
    } else {
      MutexLock lock(var_.var->mu);
      RETURN_IF_ERROR(CheckInitialized(var_));
      RETURN_IF_ERROR(CheckGrad(var_, grad, lr));
      if (!applies) {
        ctx.set_output(0, Value(var_));
        return Status::OK();
      }
      ASSIGN_OR_RETURN(Tensor var_dst, UpdateTarget(ctx, var_));
      RETURN_IF_ERROR(this->derived().Run(ctx, grad, lr, Value(var_), nullptr, var_dst, nullptr));
      Value(var_) = var_dst;
      ctx.set_output(0, Value(var_));
    }
    return Status::OK();
  }

 protected:
  VarRef var_, accum_;  // accum_: ApplyMomentum's only
  double momentum_ = 0;
  bool nesterov_ = false;
  const UpdateGate gate_;
};

}  // namespace dflow::common
