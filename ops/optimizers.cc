#include "ops/optimizers.h"

#include "graph/gradients.h"
#include "ops/grad_ops.h"
#include "ops/state_ops.h"
#include "ops/training_ops.h"

namespace dflow::ops {

Operation Optimizer::Minimize(const Scope& scope, Output loss, const std::vector<Output>& vars) {
  for (const auto& v : vars) {
    if (!v.valid() || v.node().op() != "Variable") {
      scope.UpdateStatus(InvalidArgument("Minimize: '{}' is not a Variable",
                                         v.valid() ? v.node_name() : std::string("<invalid>")));
      return {};
    }
  }
  auto grads = Gradients(scope, loss, vars);
  if (!grads.ok()) return {};
  std::vector<Output> updates;
  for (size_t i = 0; i < vars.size(); ++i) {
    Scope s =
        scope.WithNameScope(vars[i].node_name().substr(scope.name_prefix().size()) + "/update");
    updates.push_back(Update(s.WithColocation(vars[i]), vars[i], grads->at(i)));
  }
  return NoOp(scope.WithControlDependencies(updates).WithOpName("train_step"));
}

Output Optimizer::Slot(const Scope& scope, Output var, const std::string& name, const Shape& shape,
                       DType dtype) {
  Output slot = Variable(scope.WithOpName(name), shape, dtype);
  Output init = Assign(scope.WithOpName(name + "_init"), slot, Fill(scope, shape, 0, dtype));
  if (init.valid()) init_targets_.push_back(init.node_name());
  return slot;
}

Output SGD::Update(const Scope& scope, Output var, Output grad) {
  return ApplySGD(scope, var, ScalarConst(scope, var.dtype(), o_.learning_rate), grad);
}

Output Momentum::Update(const Scope& scope, Output var, Output grad) {
  Output accum = Slot(scope, var, "accum", var.shape(), var.dtype());
  return ApplyMomentum(scope, var, accum, ScalarConst(scope, var.dtype(), o_.learning_rate), grad,
                       o_.momentum, o_.nesterov);
}

Output Adam::Update(const Scope& scope, Output var, Output grad) {
  Output m = Slot(scope, var, "m", var.shape(), var.dtype());
  Output v = Slot(scope, var, "v", var.shape(), var.dtype());
  Output step = Slot(scope, var, "step", Shape{}, DType::kI64);
  return ApplyAdam(scope, var, m, v, step, ScalarConst(scope, var.dtype(), o_.learning_rate), grad,
                   {.beta1 = o_.beta1,
                    .beta2 = o_.beta2,
                    .epsilon = o_.epsilon,
                    .weight_decay = o_.weight_decay});
}

}  // namespace dflow::ops
