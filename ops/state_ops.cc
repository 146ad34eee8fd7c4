#include "ops/state_ops.h"

#include "ops/op_definitions.h"

namespace dflow::ops {

Output Variable(const Scope& scope, const Shape& shape, DType dtype) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Variable", {}, {{"dtype", dtype}, {"shape", shape}}));
}

Output Assign(const Scope& scope, Output variable, Output value, const AssignAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(
      scope.AddNode("Assign", {variable, value}, {{"validate_shape", attrs.validate_shape}}));
}

}  // namespace dflow::ops
