// Internal: how kernels that update variables (Assign, ApplySGD, ApplyMomentum, ApplyAdam), on
// any device, find them, check their inputs and choose where to write.
#pragma once

#include <string>
#include <variant>

#include "framework/kernel.h"

namespace dflow::common {

// The variable read by input `input` of the node being built.
struct VarRef {
  std::string name;
  VariableStore::Variable* var;
  int input;
};

inline VarRef LookupVariable(const KernelInit& init, int input) {
  std::string name = init.graph.node(init.node.inputs()[input].node).name();
  return {name, init.variables->GetOrCreate(name), input};
}

// True when `cur` (the stored value read by input `input`) may be overwritten: nobody holds it
// but the store and, on its last use in this run, this node's input.
inline bool CanUpdateInPlace(const KernelContext& ctx, const Tensor& cur, int input) {
  if (!cur.valid() || cur.buffer_read_only()) return false;
  if (cur.buffer_unique()) return true;
  return cur.SharesBufferWith(ctx.input(input)) && cur.buffer_refs() == 2 && ctx.IsLastUse(input);
}

// The variable's value, valid while the caller holds the lock. Kernels hold this reference
// rather than one bound to `ref.var->value` directly: the lock analysis follows such a binding
// into the lambdas that compute the update (where it cannot see the caller's lock) and, in
// Clang 14, loses its base through a reference parameter. REQUIRES: ref.var->mu held.
inline Tensor& Value(const VarRef& ref) DFLOW_REQUIRES(ref.var->mu) { return ref.var->value; }

// Where to write the new value of `ref`: its current buffer when that is safe, else a fresh one.
// The caller computes new values from the current ones and stores the result in the variable.
// REQUIRES: ref.var->mu held and the value initialised.
inline Result<Tensor> UpdateTarget(const KernelContext& ctx, const VarRef& ref)
    DFLOW_REQUIRES(ref.var->mu) {
  const Tensor& cur = Value(ref);
  if (CanUpdateInPlace(ctx, cur, ref.input)) {
    Tensor target = cur;
    target.clear_known_bound();
    return target;
  }
  return Tensor::Allocate(ctx.allocator(), cur.dtype(), cur.shape());
}

// REQUIRES: ref.var->mu held.
inline Status CheckInitialized(const VarRef& ref) DFLOW_REQUIRES(ref.var->mu) {
  if (!ref.var->value.valid()) {
    return FailedPrecondition("variable '{}' is uninitialised: run an Assign to it first",
                              ref.name);
  }
  return Status::OK();
}

// InvalidArgument naming the variable when `grad` does not match its value or `lr` is not a
// scalar of its dtype. REQUIRES: ref.var->mu held.
inline Status CheckGrad(const VarRef& ref, const Tensor& grad, const Tensor& lr)
    DFLOW_REQUIRES(ref.var->mu) {
  const Tensor& cur = Value(ref);
  if (grad.shape() != cur.shape() || grad.dtype() != cur.dtype()) {
    return InvalidArgument("gradient {}{} does not match variable '{}' {}{}", grad.dtype(),
                           grad.shape(), ref.name, cur.dtype(), cur.shape());
  }
  if (lr.num_elements() != 1 || lr.dtype() != cur.dtype()) {
    return InvalidArgument("learning rate must be a scalar {}", cur.dtype());
  }
  return Status::OK();
}

// ApplyAdam's (and ApplyAdamW's, weight_decay > 0) variables and attributes, as every device's
// kernel reads them from the node.
struct AdamOperands {
  explicit AdamOperands(const KernelInit& init)
      : var(LookupVariable(init, 0)),
        m(LookupVariable(init, 1)),
        v(LookupVariable(init, 2)),
        step(LookupVariable(init, 3)),
        beta1(std::get<double>(*init.node.FindAttr("beta1"))),
        beta2(std::get<double>(*init.node.FindAttr("beta2"))),
        epsilon(std::get<double>(*init.node.FindAttr("epsilon"))),
        weight_decay(std::get<double>(*init.node.FindAttr("weight_decay"))) {}
  VarRef var, m, v, step;
  double beta1, beta2, epsilon, weight_decay;
};

// Adam's checks: every variable initialised, `grad` and `lr` matching var, m and v, the step
// counter a scalar i64. REQUIRES: the four variables' locks held.
inline Status CheckAdam(const AdamOperands& a, const Tensor& grad, const Tensor& lr)
    DFLOW_REQUIRES(a.var.var->mu, a.m.var->mu, a.v.var->mu, a.step.var->mu) {
  // One call each, not a loop over pointers: the analysis checks each variable's lock.
  RETURN_IF_ERROR(CheckInitialized(a.var));
  RETURN_IF_ERROR(CheckInitialized(a.m));
  RETURN_IF_ERROR(CheckInitialized(a.v));
  RETURN_IF_ERROR(CheckInitialized(a.step));
  RETURN_IF_ERROR(CheckGrad(a.var, grad, lr));
  RETURN_IF_ERROR(CheckGrad(a.m, grad, lr));
  RETURN_IF_ERROR(CheckGrad(a.v, grad, lr));
  const Tensor& step = Value(a.step);
  if (step.dtype() != DType::kI64 || step.num_elements() != 1) {
    return InvalidArgument("step counter '{}' is {}{}, not a scalar i64", a.step.name, step.dtype(),
                           step.shape());
  }
  return Status::OK();
}

}  // namespace dflow::common
