#include "ops/optimizers.h"

#include "graph/gradients.h"
#include "ops/grad_ops.h"
#include "ops/state_ops.h"
#include "ops/training_ops.h"

namespace dflow::ops {

Operation Optimizer::Minimize(const Scope& scope, Output loss, const std::vector<Output>& vars) {
  for (const auto& v : vars) {
    if (!v.valid() || v.node().role() != OpRole::kVariable) {
      scope.UpdateStatus(InvalidArgument("Minimize: '{}' is not a Variable",
                                         v.valid() ? v.node_name() : std::string("<invalid>")));
      return {};
    }
  }
  auto grads = Gradients(scope, loss, vars);
  if (!grads.ok()) return {};
  // Each update waits for the step's other readers of its variable (the forward op and the
  // backward ops that read the old value), so it can update in place instead of copying.
  const Graph& g = scope.graph();
  std::vector<bool> in_step(g.num_nodes(), false);
  std::vector<int> stack = {loss.node_id()};
  for (const auto& gr : *grads) stack.push_back(gr.node_id());
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (in_step[id]) continue;
    in_step[id] = true;
    for (const auto& e : g.node(id).inputs()) stack.push_back(e.node);
    for (int c : g.node(id).control_inputs()) stack.push_back(c);
  }
  std::vector<Output> updates;
  for (size_t i = 0; i < vars.size(); ++i) {
    std::vector<std::string> readers;
    for (int id = 0; id < static_cast<int>(in_step.size()); ++id) {
      if (!in_step[id]) continue;
      for (const auto& e : g.node(id).inputs()) {
        if (e.node == vars[i].node_id()) {
          readers.push_back(g.node(id).name());
          break;
        }
      }
    }
    Scope s =
        scope.WithNameScope(vars[i].node_name().substr(scope.name_prefix().size()) + "/update");
    Output update = Update(s.WithColocation(vars[i]), vars[i], grads->at(i));
    if (!update.valid()) return {};
    // On the update node alone: its slot variables and constants must not wait on the step.
    for (const auto& r : readers) {
      Status st = scope.graph_ptr()->AddControlInput(update.node_id(), r);
      if (!st.ok()) {
        scope.UpdateStatus(st);
        return {};
      }
    }
    updates.push_back(update);
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
