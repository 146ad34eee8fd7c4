// The definitions (shape, cost, properties) and gradients of the element-wise unary ops.
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"

namespace dflow::ops::internal {
namespace {

// Gradients in terms of the forward input x, output y and incoming gradient g.
Status NegGrad(GradContext& c) {
  c.set_input_grad(0, Neg(c.scope(), c.grad(0)));
  return Status::OK();
}
Status ExpGrad(GradContext& c) {
  c.set_input_grad(0, Mul(c.scope(), c.grad(0), c.output(0)));
  return Status::OK();
}
Status LogGrad(GradContext& c) {
  c.set_input_grad(0, Div(c.scope(), c.grad(0), c.input(0)));
  return Status::OK();
}
Status SqrtGrad(GradContext& c) {  // g / (2 y)
  const Scope& s = c.scope();
  c.set_input_grad(0, Div(s, c.grad(0), Mul(s, ScalarLike(c, c.output(0), 2), c.output(0))));
  return Status::OK();
}
Status RsqrtGrad(GradContext& c) {  // -g y^3 / 2
  const Scope& s = c.scope();
  Output y = c.output(0);
  Output y3 = Mul(s, Square(s, y), y);
  c.set_input_grad(0, Mul(s, Mul(s, c.grad(0), y3), ScalarLike(c, y, -0.5)));
  return Status::OK();
}
Status SquareGrad(GradContext& c) {  // 2 x g
  const Scope& s = c.scope();
  c.set_input_grad(0, Mul(s, c.grad(0), Mul(s, ScalarLike(c, c.input(0), 2), c.input(0))));
  return Status::OK();
}
Status SigmoidGrad(GradContext& c) {  // g y (1 - y)
  const Scope& s = c.scope();
  Output y = c.output(0);
  c.set_input_grad(0, Mul(s, c.grad(0), Mul(s, y, Sub(s, ScalarLike(c, y, 1), y))));
  return Status::OK();
}
Status TanhGrad(GradContext& c) {  // g (1 - y^2)
  const Scope& s = c.scope();
  Output y = c.output(0);
  c.set_input_grad(0, Mul(s, c.grad(0), Sub(s, ScalarLike(c, y, 1), Square(s, y))));
  return Status::OK();
}
Status LeakyReluGradFn(GradContext& c) {
  ASSIGN_OR_RETURN(double alpha, c.node().GetAttr<double>("alpha"));
  c.set_input_grad(0, LeakyReluGrad(c.scope(), c.grad(0), c.input(0), alpha));
  return Status::OK();
}
Status GeluGradFn(GradContext& c) {
  c.set_input_grad(0, GeluGrad(c.scope(), c.grad(0), c.input(0)));
  return Status::OK();
}
Status CastGrad(GradContext& c) {
  DType src = c.input(0).dtype();
  if (!IsFloatingPoint(src) || !IsFloatingPoint(c.output(0).dtype())) {
    return InvalidArgument("node '{}': op Cast from {} to {} has no gradient", c.node().name(), src,
                           c.output(0).dtype());
  }
  c.set_input_grad(0, Cast(c.scope(), c.grad(0), src));
  return Status::OK();
}

OpDef Unary(const std::string& name, std::vector<DType> types, double flops, GradFn grad) {
  return {.name = name,
          .inputs = {{.name = "x", .type_attr = "T", .allowed = types}},
          .outputs = {{.name = "y", .type_attr = "T"}},
          .attrs = {{"T", AttrType::kDType, std::nullopt}},
          .elementwise = true,
          .shape_fn = SameShapeAsInput0,
          .cost_fn = ElementwiseCostFn(flops),
          .grad_fn = std::move(grad)};
}

}  // namespace

Status RegisterUnaryOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register(Unary("Neg", kNumericTypes, 1, NegGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Exp", kFloatTypes, 8, ExpGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Log", kFloatTypes, 8, LogGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Sqrt", kFloatTypes, 4, SqrtGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Rsqrt", kFloatTypes, 4, RsqrtGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Square", kNumericTypes, 1, SquareGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Sigmoid", kFloatTypes, 10, SigmoidGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Tanh", kFloatTypes, 10, TanhGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Gelu", kFloatTypes, 12, GeluGradFn)));
  OpDef leaky = Unary("LeakyRelu", kFloatTypes, 2, LeakyReluGradFn);
  leaky.attrs.push_back({"alpha", AttrType::kFloat, 0.2});
  RETURN_IF_ERROR(r.Register(std::move(leaky)));
  RETURN_IF_ERROR(
      r.Register({.name = "Cast",
                  .inputs = {{.name = "x", .type_attr = "SrcT", .allowed = kConvertTypes}},
                  .outputs = {{.name = "y", .type_attr = "DstT", .allowed = kConvertTypes}},
                  .attrs = {{"SrcT", AttrType::kDType, std::nullopt},
                            {"DstT", AttrType::kDType, std::nullopt}},
                  .elementwise = true,
                  .shape_fn = SameShapeAsInput0,
                  .cost_fn = ElementwiseCostFn(1),
                  .grad_fn = CastGrad}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
