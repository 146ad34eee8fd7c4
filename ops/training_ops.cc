#include "ops/training_ops.h"

#include "ops/op_defs.h"
#include "ops/register.h"

namespace dflow::ops {
namespace internal {
namespace {

Status ApplySGDShape(InferenceContext& c) {
  const Node& var = c.input_node(0);
  if (var.op() != "Variable") {
    return c.Error("input 0 must come from a Variable, but '{}' is a {}", var.name(), var.op());
  }
  if (!c.input_shape(1).unknown_rank() && c.input_shape(1).rank() != 0) {
    return c.Error("learning_rate must be a scalar, got {}", c.input_shape(1));
  }
  if (!c.input_shape(0).IsCompatibleWith(c.input_shape(2))) {
    return c.Error("grad has shape {} but variable '{}' has shape {}", c.input_shape(2), var.name(),
                   c.input_shape(0));
  }
  c.set_output(0, c.input_shape(0));
  return Status::OK();
}

}  // namespace

Status RegisterTrainingOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register({.name = "ApplySGD",
                              .inputs = {{.name = "var", .type_attr = "T", .allowed = kFloatTypes},
                                         {.name = "learning_rate", .type_attr = "T"},
                                         {.name = "grad", .type_attr = "T"}},
                              .outputs = {{.name = "updated", .type_attr = "T"}},
                              .attrs = {{"T", AttrType::kDType, std::nullopt}},
                              .stateful = true,
                              .shape_fn = ApplySGDShape,
                              .cost_fn = ElementwiseCostFn(2)}));
  return Status::OK();
}

}  // namespace internal

Output ApplySGD(const Scope& scope, Output variable, Output learning_rate, Output grad) {
  RegisterStandardOps();
  return scope.OutputOf(scope.AddNode("ApplySGD", {variable, learning_rate, grad}, {}));
}

}  // namespace dflow::ops
