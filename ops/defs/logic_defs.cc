// The definitions (shape, cost, properties) and gradients of the comparison and selection ops.
#include "ops/array_ops.h"
#include "ops/broadcast.h"
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"
#include "ops/logic_ops.h"

namespace dflow::ops::internal {
namespace {

Status SelectShape(InferenceContext& c) {
  auto ab = BroadcastShape(c.input_shape(1), c.input_shape(2));
  if (!ab.ok()) return c.Error("{}", ab.status().message());
  auto all = BroadcastShape(c.input_shape(0), *ab);
  if (!all.ok()) return c.Error("condition: {}", all.status().message());
  c.set_output(0, *all);
  return Status::OK();
}

Status SelectGrad(GradContext& c) {
  const Scope& s = c.scope();
  Output g = c.grad(0), zeros = ZerosLike(s, g), cond = c.input(0);
  if (c.wanted(1)) c.set_input_grad(1, Unbroadcast(c, Select(s, cond, g, zeros), 1));
  if (c.wanted(2)) c.set_input_grad(2, Unbroadcast(c, Select(s, cond, zeros, g), 2));
  return Status::OK();
}

}  // namespace

Status RegisterLogicOps(OpRegistry& r) {
  for (const char* name : {"Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual"}) {
    RETURN_IF_ERROR(r.Register(
        {.name = name,
         .inputs = {{.name = "a", .type_attr = "T", .allowed = kNumericTypes},
                    {.name = "b", .type_attr = "T", .allowed = kNumericTypes}},
         .outputs = {{.name = "z", .fixed = DType::kBool}},
         .attrs = {{"T", AttrType::kDType, std::nullopt}},
         .elementwise = true,
         .commutative = std::string_view(name) == "Equal" || std::string_view(name) == "NotEqual",
         .shape_fn = BroadcastShapeFn,
         .cost_fn = ElementwiseCostFn(1),
         .grad_fn = NoGradient}));  // a path through a comparison contributes zero
  }
  RETURN_IF_ERROR(r.Register({.name = "Select",
                              .inputs = {{.name = "cond", .fixed = DType::kBool},
                                         {.name = "a", .type_attr = "T", .allowed = kCastTypes},
                                         {.name = "b", .type_attr = "T", .allowed = kCastTypes}},
                              .outputs = {{.name = "output", .type_attr = "T"}},
                              .attrs = {{"T", AttrType::kDType, std::nullopt}},
                              .elementwise = true,
                              .shape_fn = SelectShape,
                              .cost_fn = ElementwiseCostFn(1),
                              .grad_fn = SelectGrad}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
