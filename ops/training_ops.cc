#include "ops/training_ops.h"

#include "ops/op_definitions.h"

namespace dflow::ops {

Output ApplySGD(const Scope& scope, Output variable, Output learning_rate, Output grad) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("ApplySGD", {variable, learning_rate, grad}, {}));
}

Output ApplyMomentum(const Scope& scope, Output variable, Output accum, Output learning_rate,
                     Output grad, double momentum, bool nesterov) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("ApplyMomentum", {variable, accum, learning_rate, grad},
                                      {{"momentum", momentum}, {"nesterov", nesterov}}));
}

Output ApplyAdam(const Scope& scope, Output variable, Output m, Output v, Output step,
                 Output learning_rate, Output grad, const AdamAttrs& attrs) {
  internal::RegisterOpDefinitions();
  const char* op = attrs.weight_decay > 0 ? "ApplyAdamW" : "ApplyAdam";
  return scope.OutputOf(scope.AddNode(op, {variable, m, v, step, learning_rate, grad},
                                      {{"beta1", attrs.beta1},
                                       {"beta2", attrs.beta2},
                                       {"epsilon", attrs.epsilon},
                                       {"weight_decay", attrs.weight_decay}}));
}

}  // namespace dflow::ops
