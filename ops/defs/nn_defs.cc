// The definitions (shape, cost, properties) and gradients of the activation and loss ops.
#include "ops/array_ops.h"
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"

namespace dflow::ops::internal {
namespace {

Status SoftmaxShape(InferenceContext& c) {
  const Shape& x = c.input_shape(0);
  if (!x.unknown_rank() && x.rank() < 1) return c.Error("logits must have rank >= 1, got a scalar");
  c.set_output(0, x);
  return Status::OK();
}

Status SoftmaxGrad(GradContext& c) {  // (g - sum(g y)) y
  const Scope& s = c.scope();
  Output y = c.output(0), g = c.grad(0);
  Output dot = ReduceSum(s, Mul(s, g, y), {-1}, {.keep_dims = true});
  c.set_input_grad(0, Mul(s, Sub(s, g, dot), y));
  return Status::OK();
}

Status LogSoftmaxGrad(GradContext& c) {  // g - exp(y) sum(g)
  const Scope& s = c.scope();
  Output y = c.output(0), g = c.grad(0);
  Output total = ReduceSum(s, g, {-1}, {.keep_dims = true});
  c.set_input_grad(0, Sub(s, g, Mul(s, Exp(s, y), total)));
  return Status::OK();
}

Status CrossEntropyShape(InferenceContext& c) {
  const Shape& logits = c.input_shape(0);
  const Shape& labels = c.input_shape(1);
  if (!logits.unknown_rank() && logits.rank() != 2) {
    return c.Error("logits must be [batch, classes], got {}", logits);
  }
  if (!labels.unknown_rank() && labels.rank() != 1) {
    return c.Error("labels must be [batch], got {}", labels);
  }
  int64_t n = logits.unknown_rank() ? -1 : logits[0];
  if (!labels.unknown_rank() && n >= 0 && labels[0] >= 0 && labels[0] != n) {
    return c.Error("logits have {} rows but labels have {}", n, labels[0]);
  }
  if (n < 0 && !labels.unknown_rank()) n = labels[0];
  c.set_output(0, Shape{n});
  c.set_output(1, logits.unknown_rank() ? Shape{n, -1} : Shape{n, logits[1]});
  return Status::OK();
}

// d loss / d logits = backprop, scaled per row by the incoming gradient. The backprop output
// itself is not differentiated (second derivatives are not needed for training).
Status CrossEntropyGrad(GradContext& c) {
  if (!c.grad(0).valid()) return Status::OK();
  const Scope& s = c.scope();
  Output g = Reshape(s, c.grad(0), {-1, 1});
  c.set_input_grad(0, Mul(s, c.output(1), g));
  return Status::OK();
}

Status DropoutShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(double rate, c.GetAttr<double>("rate"));
  if (!(rate >= 0 && rate < 1)) return c.Error("rate is {}; it must be in [0, 1)", rate);
  c.set_output(0, c.input_shape(0));
  c.set_output(1, c.input_shape(0));
  return Status::OK();
}

Status DropoutGrad(GradContext& c) {
  if (c.grad(0).valid()) c.set_input_grad(0, Mul(c.scope(), c.grad(0), c.output(1)));
  return Status::OK();
}

}  // namespace

Status RegisterNnOps(OpRegistry& r) {
  RETURN_IF_ERROR(
      r.Register({.name = "Dropout",
                  .inputs = {{.name = "x", .type_attr = "T", .allowed = kFloatTypes}},
                  .outputs = {{.name = "y", .type_attr = "T"}, {.name = "mask", .type_attr = "T"}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt},
                            {"rate", AttrType::kFloat, std::nullopt},
                            {"seed", AttrType::kInt, int64_t{0}}},
                  .stateful = true,
                  .shape_fn = DropoutShape,
                  .cost_fn = ElementwiseCostFn(4),
                  .grad_fn = DropoutGrad}));
  for (const auto& [name, grad] :
       {std::pair<const char*, GradFn>{"Softmax", SoftmaxGrad}, {"LogSoftmax", LogSoftmaxGrad}}) {
    RETURN_IF_ERROR(
        r.Register({.name = name,
                    .inputs = {{.name = "logits", .type_attr = "T", .allowed = kFloatTypes}},
                    .outputs = {{.name = "y", .type_attr = "T"}},
                    .attrs = {{"T", AttrType::kDType, std::nullopt}},
                    .shape_fn = SoftmaxShape,
                    .cost_fn = ElementwiseCostFn(12),
                    .grad_fn = grad}));
  }
  RETURN_IF_ERROR(r.Register(
      {.name = "SparseSoftmaxCrossEntropyWithLogits",
       .inputs =
           {{.name = "logits", .type_attr = "T", .allowed = kFloatTypes},
            {.name = "labels", .type_attr = "Tlabels", .allowed = {DType::kI32, DType::kI64}}},
       .outputs = {{.name = "loss", .type_attr = "T"}, {.name = "backprop", .type_attr = "T"}},
       .attrs = {{"T", AttrType::kDType, std::nullopt},
                 {"Tlabels", AttrType::kDType, std::nullopt}},
       .shape_fn = CrossEntropyShape,
       .cost_fn = ElementwiseCostFn(12),
       .grad_fn = CrossEntropyGrad}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
