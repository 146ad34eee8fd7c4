#include "ops/unary_ops.h"

#include "ops/op_definitions.h"

namespace dflow::ops {

namespace {
Output UnaryOp(const char* op, const Scope& scope, Output x, AttrMap attrs = {}) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode(op, {x}, std::move(attrs)));
}
}  // namespace

Output Neg(const Scope& s, Output x) { return UnaryOp("Neg", s, x); }
Output Exp(const Scope& s, Output x) { return UnaryOp("Exp", s, x); }
Output Log(const Scope& s, Output x) { return UnaryOp("Log", s, x); }
Output Sqrt(const Scope& s, Output x) { return UnaryOp("Sqrt", s, x); }
Output Rsqrt(const Scope& s, Output x) { return UnaryOp("Rsqrt", s, x); }
Output Square(const Scope& s, Output x) { return UnaryOp("Square", s, x); }
Output Sigmoid(const Scope& s, Output x) { return UnaryOp("Sigmoid", s, x); }
Output Tanh(const Scope& s, Output x) { return UnaryOp("Tanh", s, x); }
Output Gelu(const Scope& s, Output x) { return UnaryOp("Gelu", s, x); }
Output Abs(const Scope& s, Output x) { return UnaryOp("Abs", s, x); }
Output Sign(const Scope& s, Output x) { return UnaryOp("Sign", s, x); }
Output Floor(const Scope& s, Output x) { return UnaryOp("Floor", s, x); }
Output Ceil(const Scope& s, Output x) { return UnaryOp("Ceil", s, x); }
Output Round(const Scope& s, Output x) { return UnaryOp("Round", s, x); }
Output Sin(const Scope& s, Output x) { return UnaryOp("Sin", s, x); }
Output Cos(const Scope& s, Output x) { return UnaryOp("Cos", s, x); }
Output Tan(const Scope& s, Output x) { return UnaryOp("Tan", s, x); }
Output Asin(const Scope& s, Output x) { return UnaryOp("Asin", s, x); }
Output Acos(const Scope& s, Output x) { return UnaryOp("Acos", s, x); }
Output Atan(const Scope& s, Output x) { return UnaryOp("Atan", s, x); }
Output Sinh(const Scope& s, Output x) { return UnaryOp("Sinh", s, x); }
Output Cosh(const Scope& s, Output x) { return UnaryOp("Cosh", s, x); }
Output Asinh(const Scope& s, Output x) { return UnaryOp("Asinh", s, x); }
Output Acosh(const Scope& s, Output x) { return UnaryOp("Acosh", s, x); }
Output Atanh(const Scope& s, Output x) { return UnaryOp("Atanh", s, x); }
Output Erf(const Scope& s, Output x) { return UnaryOp("Erf", s, x); }
Output LeakyRelu(const Scope& s, Output x, double alpha) {
  return UnaryOp("LeakyRelu", s, x, {{"alpha", alpha}});
}
Output Cast(const Scope& s, Output x, DType dtype) {
  return UnaryOp("Cast", s, x, {{"DstT", dtype}});
}

}  // namespace dflow::ops
