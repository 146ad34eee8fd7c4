// The CPU kernel of Assign (Variable is shared: ops/common/). A variable's value lives in the
// device's VariableStore; Assign writes in place when that is safe (variable_update.h), and into a
// fresh buffer otherwise, so a reader never sees a half-written value and a fetched value is a
// snapshot.
#include <cstring>

#include "ops/common/variable_update.h"
#include "ops/cpu/cpu_kernels.h"

namespace dflow::cpu {

using common::CanUpdateInPlace;
using common::LookupVariable;
using common::VarRef;
namespace {

class AssignKernel : public OpKernel {
 public:
  explicit AssignKernel(const KernelInit& init)
      : ref_(LookupVariable(init, 0)),
        validate_shape_(std::get<bool>(*init.node.FindAttr("validate_shape"))),
        declared_(init.graph.node(init.node.inputs()[0].node).output_shape(0)) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& value = ctx.input(1);
    if (validate_shape_ && value.shape() != declared_) {
      return InvalidArgument("cannot assign a value of shape {} to variable '{}' of shape {}",
                             value.shape(), ref_.name, declared_);
    }
    MutexLock lock(ref_.var->mu);
    Tensor& cur = ref_.var->value;
    const bool in_place = CanUpdateInPlace(ctx, cur, 0) && cur.dtype() == value.dtype() &&
                          cur.shape() == value.shape();
    if (!in_place && ctx.IsLastUse(1) && value.buffer_unique() &&
        value.device() == ctx.allocator()->device()) {
      // Nobody else will read the value: the variable takes its buffer, so assigning (an
      // initializer, most often) needs no second copy of the variable's memory.
      cur = value;
      cur.clear_known_bound();
      ctx.set_output(0, cur);
      return Status::OK();
    }
    if (!in_place) {
      ASSIGN_OR_RETURN(cur, Tensor::Allocate(ctx.allocator(), value.dtype(), value.shape()));
    }
    if (value.num_bytes() > 0) std::memcpy(cur.raw_data(), value.raw_data(), value.num_bytes());
    cur.clear_known_bound();  // kept off variables, whose buffers are updated in place
    ctx.set_output(0, cur);
    return Status::OK();
  }

 private:
  VarRef ref_;
  bool validate_shape_;
  Shape declared_;
};

}  // namespace

Status RegisterStateKernels() {
  RETURN_IF_ERROR(RegisterKernel<AssignKernel>("Assign", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
