// The definitions (shape, cost, properties) and gradients of the element-wise unary ops.
#include "ops/array_ops.h"
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
// Piecewise constant (Sign, Floor, Ceil, Round): zero wherever the derivative exists.
Status ZeroGrad(GradContext& c) {
  c.set_input_grad(0, ZerosLike(c.scope(), c.input(0)));
  return Status::OK();
}
Status AbsGrad(GradContext& c) {  // g sign(x)
  c.set_input_grad(0, Mul(c.scope(), c.grad(0), Sign(c.scope(), c.input(0))));
  return Status::OK();
}
// g f'(x) for the functions whose derivative is d(x) below.
template <Output (*kDerivative)(const GradContext&, const Scope&, Output x, Output y)>
Status ChainGrad(GradContext& c) {
  const Scope& s = c.scope();
  c.set_input_grad(0, Mul(s, c.grad(0), kDerivative(c, s, c.input(0), c.output(0))));
  return Status::OK();
}
// 1 - x^2, x^2 + 1 and x^2 - 1, the radicands and denominators of the inverse functions.
Output OneMinusSquare(const GradContext& c, const Scope& s, Output x) {
  return Sub(s, ScalarLike(c, x, 1), Square(s, x));
}
Output SinD(const GradContext&, const Scope& s, Output x, Output) { return Cos(s, x); }
Output CosD(const GradContext&, const Scope& s, Output x, Output) { return Neg(s, Sin(s, x)); }
Output TanD(const GradContext& c, const Scope& s, Output, Output y) {
  return Add(s, ScalarLike(c, y, 1), Square(s, y));
}
Output AsinD(const GradContext& c, const Scope& s, Output x, Output) {
  return Rsqrt(s, OneMinusSquare(c, s, x));
}
Output AcosD(const GradContext& c, const Scope& s, Output x, Output) {
  return Neg(s, Rsqrt(s, OneMinusSquare(c, s, x)));
}
Output AtanD(const GradContext& c, const Scope& s, Output x, Output) {
  return Div(s, ScalarLike(c, x, 1), Add(s, ScalarLike(c, x, 1), Square(s, x)));
}
Output SinhD(const GradContext&, const Scope& s, Output x, Output) { return Cosh(s, x); }
Output CoshD(const GradContext&, const Scope& s, Output x, Output) { return Sinh(s, x); }
Output AsinhD(const GradContext& c, const Scope& s, Output x, Output) {
  return Rsqrt(s, Add(s, Square(s, x), ScalarLike(c, x, 1)));
}
Output AcoshD(const GradContext& c, const Scope& s, Output x, Output) {
  return Rsqrt(s, Sub(s, Square(s, x), ScalarLike(c, x, 1)));
}
Output AtanhD(const GradContext& c, const Scope& s, Output x, Output) {
  return Div(s, ScalarLike(c, x, 1), OneMinusSquare(c, s, x));
}
Output ErfD(const GradContext& c, const Scope& s, Output x, Output) {  // 2/sqrt(pi) e^(-x^2)
  return Mul(s, ScalarLike(c, x, 1.12837916709551257390), Exp(s, Neg(s, Square(s, x))));
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
  RETURN_IF_ERROR(r.Register(Unary("Abs", kNumericTypes, 1, AbsGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Sign", kNumericTypes, 1, ZeroGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Floor", kFloatTypes, 1, ZeroGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Ceil", kFloatTypes, 1, ZeroGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Round", kFloatTypes, 1, ZeroGrad)));
  RETURN_IF_ERROR(r.Register(Unary("Sin", kFloatTypes, 8, ChainGrad<SinD>)));
  RETURN_IF_ERROR(r.Register(Unary("Cos", kFloatTypes, 8, ChainGrad<CosD>)));
  RETURN_IF_ERROR(r.Register(Unary("Tan", kFloatTypes, 8, ChainGrad<TanD>)));
  RETURN_IF_ERROR(r.Register(Unary("Asin", kFloatTypes, 8, ChainGrad<AsinD>)));
  RETURN_IF_ERROR(r.Register(Unary("Acos", kFloatTypes, 8, ChainGrad<AcosD>)));
  RETURN_IF_ERROR(r.Register(Unary("Atan", kFloatTypes, 8, ChainGrad<AtanD>)));
  RETURN_IF_ERROR(r.Register(Unary("Sinh", kFloatTypes, 8, ChainGrad<SinhD>)));
  RETURN_IF_ERROR(r.Register(Unary("Cosh", kFloatTypes, 8, ChainGrad<CoshD>)));
  RETURN_IF_ERROR(r.Register(Unary("Asinh", kFloatTypes, 8, ChainGrad<AsinhD>)));
  RETURN_IF_ERROR(r.Register(Unary("Acosh", kFloatTypes, 8, ChainGrad<AcoshD>)));
  RETURN_IF_ERROR(r.Register(Unary("Atanh", kFloatTypes, 8, ChainGrad<AtanhD>)));
  RETURN_IF_ERROR(r.Register(Unary("Erf", kFloatTypes, 10, ChainGrad<ErfD>)));
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
