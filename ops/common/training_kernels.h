// What the optimizer kernels of every device share (ops/common/kernel_base.h): ApplyAdam and
// ApplyAdamW lock their four variables, check them (variable_update.h), choose where each new
// value goes and store the new values once the device's kernel has written them.
#pragma once

#include "graph/mutex.h"
#include "ops/common/kernel_base.h"
#include "ops/common/variable_update.h"

namespace dflow::common {

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
  explicit AdamBase(const KernelInit& init) : a_(init) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& lr = ctx.input(4);
    const Tensor& grad = ctx.input(5);
    MutexLocks lock(a_.var.var->mu, a_.m.var->mu, a_.v.var->mu, a_.step.var->mu);
    RETURN_IF_ERROR(CheckAdam(a_, grad, lr));
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
};

}  // namespace dflow::common
