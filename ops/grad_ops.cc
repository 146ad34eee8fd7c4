#include "ops/grad_ops.h"

#include "ops/array_ops.h"
#include "ops/op_definitions.h"

namespace dflow::ops {

namespace {
Output Two(const char* op, const Scope& scope, Output a, Output b, AttrMap attrs = {}) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode(op, {a, b}, std::move(attrs)));
}
}  // namespace

Output SumToShapeOf(const Scope& s, Output x, Output like) {
  return Two("SumToShapeOf", s, x, like);
}
Output ReshapeLike(const Scope& s, Output x, Output like) { return Two("ReshapeLike", s, x, like); }
Output ReduceGrad(const Scope& s, Output g, Output x, const std::vector<int64_t>& axes,
                  bool keep_dims, bool mean) {
  return Two("ReduceGrad", s, g, x, {{"axes", axes}, {"keep_dims", keep_dims}, {"mean", mean}});
}
Output ReluGrad(const Scope& s, Output g, Output x) { return Two("ReluGrad", s, g, x); }
Output LeakyReluGrad(const Scope& s, Output g, Output x, double alpha) {
  return Two("LeakyReluGrad", s, g, x, {{"alpha", alpha}});
}
Output GeluGrad(const Scope& s, Output g, Output x) { return Two("GeluGrad", s, g, x); }

Output ScalarConst(const Scope& scope, DType dtype, double value) {
  switch (dtype) {
    case DType::kF32:
      return Const(scope, static_cast<float>(value));
    case DType::kF64:
      return Const(scope, value);
    case DType::kI32:
      return Const(scope, static_cast<int32_t>(value));
    case DType::kI64:
      return Const(scope, static_cast<int64_t>(value));
    default:
      scope.UpdateStatus(InvalidArgument("ScalarConst: unsupported dtype {}", dtype));
      return Output();
  }
}

}  // namespace dflow::ops
