// Internal: how kernels that update variables (Assign, ApplySGD, ApplyMomentum, ApplyAdam) find
// them and choose where to write.
#pragma once

#include <string>

#include "framework/kernel.h"

namespace dflow::cpu {

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
  if (!cur.valid()) return false;
  if (cur.buffer_unique()) return true;
  return cur.SharesBufferWith(ctx.input(input)) && cur.buffer_refs() == 2 && ctx.IsLastUse(input);
}

// Where to write the new value of `ref`: its current buffer when that is safe, else a fresh one.
// The caller computes new values from the current ones and stores the result in the variable.
// REQUIRES: ref.var->mu held and the value initialised.
inline Result<Tensor> UpdateTarget(const KernelContext& ctx, const VarRef& ref) {
  const Tensor& cur = ref.var->value;
  if (CanUpdateInPlace(ctx, cur, ref.input)) return cur;
  return Tensor::Allocate(ctx.allocator(), cur.dtype(), cur.shape());
}

inline Status CheckInitialized(const VarRef& ref) {
  if (!ref.var->value.valid()) {
    return FailedPrecondition("variable '{}' is uninitialised: run an Assign to it first",
                              ref.name);
  }
  return Status::OK();
}

}  // namespace dflow::cpu
