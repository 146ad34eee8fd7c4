#include "ops/math_ops.h"

#include <algorithm>

#include "ops/op_definitions.h"

namespace dflow::ops {

namespace {
Output BinaryOp(const char* op, const Scope& scope, Output a, Output b) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode(op, {a, b}, {}));
}
}  // namespace

Output Add(const Scope& s, Output a, Output b) { return BinaryOp("Add", s, a, b); }
Output Sub(const Scope& s, Output a, Output b) { return BinaryOp("Sub", s, a, b); }
Output Mul(const Scope& s, Output a, Output b) { return BinaryOp("Mul", s, a, b); }
Output Div(const Scope& s, Output a, Output b) { return BinaryOp("Div", s, a, b); }
Output Maximum(const Scope& s, Output a, Output b) { return BinaryOp("Maximum", s, a, b); }
Output Minimum(const Scope& s, Output a, Output b) { return BinaryOp("Minimum", s, a, b); }
Output Pow(const Scope& s, Output a, Output b) { return BinaryOp("Pow", s, a, b); }

Output Relu(const Scope& scope, Output x) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Relu", {x}, {}));
}

Output MatMul(const Scope& scope, Output a, Output b, const MatMulAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode(
      "MatMul", {a, b}, {{"transpose_a", attrs.transpose_a}, {"transpose_b", attrs.transpose_b}}));
}

Output BatchMatMul(const Scope& scope, Output a, Output b, const MatMulAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(
      scope.AddNode("BatchMatMul", {a, b},
                    {{"transpose_a", attrs.transpose_a}, {"transpose_b", attrs.transpose_b}}));
}

Output BiasAdd(const Scope& scope, Output x, Output bias) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("BiasAdd", {x, bias}, {}));
}

Output ReduceSum(const Scope& scope, Output x, const std::vector<int64_t>& axes,
                 const ReduceAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(
      scope.AddNode("ReduceSum", {x}, {{"axes", axes}, {"keep_dims", attrs.keep_dims}}));
}

Output CumSum(const Scope& scope, Output x, Output axis, bool exclusive, bool reverse) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode(
      "CumSum", {x, axis}, {{"exclusive", int64_t{exclusive}}, {"reverse", int64_t{reverse}}}));
}
Output ReduceProd(const Scope& scope, Output x, const std::vector<int64_t>& axes,
                  const ReduceAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(
      scope.AddNode("ReduceProd", {x}, {{"axes", axes}, {"keep_dims", attrs.keep_dims}}));
}
Output ReduceMax(const Scope& scope, Output x, const std::vector<int64_t>& axes,
                 const ReduceAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(
      scope.AddNode("ReduceMax", {x}, {{"axes", axes}, {"keep_dims", attrs.keep_dims}}));
}

Output ArgMax(const Scope& scope, Output x, int64_t axis) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("ArgMax", {x}, {{"axis", axis}}));
}

Output ReduceMean(const Scope& scope, Output x, const std::vector<int64_t>& axes,
                  const ReduceAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(
      scope.AddNode("ReduceMean", {x}, {{"axes", axes}, {"keep_dims", attrs.keep_dims}}));
}

}  // namespace dflow::ops
