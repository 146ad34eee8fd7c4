// The definitions (shape, cost, properties) and gradients of the optimizer update ops.
#include "ops/defs/op_defs.h"
#include "ops/training_ops.h"

namespace dflow::ops::internal {
namespace {

// Checks that inputs [0, num_vars) come from Variables, input `lr` is a scalar and input `grad`
// matches the variable's shape.
Status UpdateShape(InferenceContext& c, int num_vars, int lr, int grad) {
  for (int i = 0; i < num_vars; ++i) {
    const Node& var = c.input_node(i);
    if (var.role() != OpRole::kVariable) {
      return c.Error("input {} must come from a Variable, but '{}' is a {}", i, var.name(),
                     var.op());
    }
  }
  if (!c.input_shape(lr).unknown_rank() && c.input_shape(lr).rank() != 0) {
    return c.Error("learning_rate must be a scalar, got {}", c.input_shape(lr));
  }
  if (!c.input_shape(0).IsCompatibleWith(c.input_shape(grad))) {
    return c.Error("grad has shape {} but variable '{}' has shape {}", c.input_shape(grad),
                   c.input_node(0).name(), c.input_shape(0));
  }
  c.set_output(0, c.input_shape(0));
  return Status::OK();
}

ShapeFn Update(int num_vars, int lr, int grad) {
  return [=](InferenceContext& c) { return UpdateShape(c, num_vars, lr, grad); };
}

// Registers `def` and its gated twin "<name>If": the same update with a last input "apply" (a
// bool scalar) that, when false, leaves every variable of the update as it was. The twin does
// not absorb its gradient's MatMul (the fused update has no gate).
Status RegisterWithGate(OpRegistry& r, OpDef def) {
  OpDef gated = def;
  RETURN_IF_ERROR(r.Register(std::move(def)));
  gated.name += "If";
  gated.fusion = {};
  gated.inputs.push_back({.name = "apply", .fixed = DType::kBool});
  ShapeFn update = gated.shape_fn;
  gated.shape_fn = [update](InferenceContext& c) -> Status {
    const Shape& apply = c.input_shape(c.num_inputs() - 1);
    if (!apply.unknown_rank() && apply.rank() != 0) {
      return c.Error("apply must be a bool scalar, got {}", apply);
    }
    return update(c);
  };
  return r.Register(std::move(gated));
}

// AllFinite: one bool scalar, whether no element of any input is NaN or infinite.
Status AllFiniteShape(InferenceContext& c) {
  c.set_output(0, Shape{});
  return Status::OK();
}

}  // namespace

Status RegisterTrainingOps(OpRegistry& r) {
  RETURN_IF_ERROR(
      RegisterWithGate(r, {.name = "ApplySGD",
                           .inputs = {{.name = "var", .type_attr = "T", .allowed = kFloatTypes},
                                      {.name = "learning_rate", .type_attr = "T"},
                                      {.name = "grad", .type_attr = "T"}},
                           .outputs = {{.name = "updated", .type_attr = "T"}},
                           .attrs = {{"T", AttrType::kDType, std::nullopt}},
                           .stateful = true,
                           .row_wise_update = true,
                           // The gradient's MatMul folds into the update (rewrite/fusion.h).
                           .fusion = {.kind = OpFusion::Kind::kAbsorbGradient,
                                      .fused_op = "_MatMulApplySGD",
                                      .gradient_input = 2},
                           .shape_fn = Update(1, 1, 2),
                           .cost_fn = ElementwiseCostFn(2)}));
  RETURN_IF_ERROR(
      RegisterWithGate(r, {.name = "ApplyMomentum",
                           .inputs = {{.name = "var", .type_attr = "T", .allowed = kFloatTypes},
                                      {.name = "accum", .type_attr = "T"},
                                      {.name = "learning_rate", .type_attr = "T"},
                                      {.name = "grad", .type_attr = "T"}},
                           .outputs = {{.name = "updated", .type_attr = "T"}},
                           .attrs = {{"T", AttrType::kDType, std::nullopt},
                                     {"momentum", AttrType::kFloat, 0.9},
                                     {"nesterov", AttrType::kBool, false}},
                           .stateful = true,
                           .row_wise_update = true,
                           .shape_fn = Update(2, 2, 3),
                           .cost_fn = ElementwiseCostFn(4)}));
  // ApplyAdamW is ApplyAdam under the name users of decoupled weight decay look for; its
  // weight_decay defaults to 0.01 (PyTorch's AdamW default).
  for (const char* name : {"ApplyAdam", "ApplyAdamW"}) {
    bool w = std::string_view(name) == "ApplyAdamW";
    RETURN_IF_ERROR(
        RegisterWithGate(r, {.name = name,
                             .inputs = {{.name = "var", .type_attr = "T", .allowed = kFloatTypes},
                                        {.name = "m", .type_attr = "T"},
                                        {.name = "v", .type_attr = "T"},
                                        {.name = "step", .fixed = DType::kI64},
                                        {.name = "learning_rate", .type_attr = "T"},
                                        {.name = "grad", .type_attr = "T"}},
                             .outputs = {{.name = "updated", .type_attr = "T"}},
                             .attrs = {{"T", AttrType::kDType, std::nullopt},
                                       {"beta1", AttrType::kFloat, 0.9},
                                       {"beta2", AttrType::kFloat, 0.999},
                                       {"epsilon", AttrType::kFloat, 1e-8},
                                       {"weight_decay", AttrType::kFloat, w ? 0.01 : 0.0}},
                             .stateful = true,
                             .row_wise_update = true,
                             .shape_fn = Update(4, 4, 5),
                             .cost_fn = ElementwiseCostFn(12)}));
  }
  // The check of a step's gradients under dynamic loss scaling (rewrite/mixed_precision.h).
  RETURN_IF_ERROR(r.Register(
      {.name = "AllFinite",
       .inputs = {{.name = "xs", .type_attr = "T", .allowed = kDenseTypes, .variadic = true}},
       .outputs = {{.name = "finite", .fixed = DType::kBool}},
       .attrs = {{"T", AttrType::kDType, std::nullopt}},
       .shape_fn = AllFiniteShape,
       .cost_fn = ElementwiseCostFn(1)}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
