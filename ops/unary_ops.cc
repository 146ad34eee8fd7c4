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
Output LeakyRelu(const Scope& s, Output x, double alpha) {
  return UnaryOp("LeakyRelu", s, x, {{"alpha", alpha}});
}
Output Cast(const Scope& s, Output x, DType dtype) {
  return UnaryOp("Cast", s, x, {{"DstT", dtype}});
}

}  // namespace dflow::ops
