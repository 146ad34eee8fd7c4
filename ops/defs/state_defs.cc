// The definitions (shape, cost, properties) and gradients of the variable ops.
#include "ops/defs/op_defs.h"
#include "ops/state_ops.h"

namespace dflow::ops::internal {
namespace {

Status VariableShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(Shape s, c.GetAttr<Shape>("shape"));
  if (!s.fully_defined()) return c.Error("a variable's shape must be fully defined, got {}", s);
  c.set_output(0, s);
  return Status::OK();
}

Status AssignShape(InferenceContext& c) {
  const Node& var = c.input_node(0);
  if (var.role() != OpRole::kVariable) {
    return c.Error("input 0 must come from a Variable, but '{}' is a {}", var.name(), var.op());
  }
  ASSIGN_OR_RETURN(bool validate, c.GetAttr<bool>("validate_shape"));
  const Shape& target = c.input_shape(0);
  const Shape& value = c.input_shape(1);
  if (validate && !target.IsCompatibleWith(value)) {
    return c.Error("cannot assign a value of shape {} to variable '{}' of shape {}", value,
                   var.name(), target);
  }
  c.set_output(0, validate ? target : value);
  return Status::OK();
}

}  // namespace

Status RegisterStateOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register({.name = "Variable",
                              .outputs = {{.name = "ref", .type_attr = "dtype"}},
                              // mirror_of: the variable this one is a copy of (a replica's
                              // copy, rewrite/replicate.h), whose value a checkpoint holds for
                              // both (runtime/checkpoint_check.h); "": none.
                              .attrs = {{"dtype", AttrType::kDType, std::nullopt},
                                        {"shape", AttrType::kShape, std::nullopt},
                                        {"mirror_of", AttrType::kString, std::string()}},
                              .stateful = true,
                              .constant_cost = true,
                              .role = OpRole::kVariable,
                              .shape_fn = VariableShape,
                              .cost_fn = [](const CostContext&) { return OpCost{}; }}));
  RETURN_IF_ERROR(r.Register(
      {.name = "Assign",
       .inputs = {{.name = "ref", .type_attr = "T", .may_be_uninitialized = true},
                  {.name = "value", .type_attr = "T"}},
       .outputs = {{.name = "output", .type_attr = "T"}},
       .attrs = {{"T", AttrType::kDType, std::nullopt}, {"validate_shape", AttrType::kBool, true}},
       .stateful = true,
       .role = OpRole::kAssign,
       .row_wise_update = true,
       .shape_fn = AssignShape,
       .cost_fn = [](const CostContext& c) { return ElementwiseCost(c, 0); }}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
