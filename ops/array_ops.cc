#include "ops/array_ops.h"

#include "ops/op_definitions.h"

namespace dflow::ops {

Output Placeholder(const Scope& scope, DType dtype, const Shape& shape) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Placeholder", {}, {{"dtype", dtype}, {"shape", shape}}));
}

Output Const(const Scope& scope, const Tensor& value) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Const", {}, {{"value", value}, {"dtype", value.dtype()}}));
}

Output Identity(const Scope& scope, Output x) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Identity", {x}, {}));
}

Operation NoOp(const Scope& scope) {
  internal::RegisterOpDefinitions();
  return {scope.OutputOf(scope.AddNode("NoOp", {}, {}))};
}

Output ZerosLike(const Scope& scope, Output x) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("ZerosLike", {x}, {}));
}

Output OnesLike(const Scope& scope, Output x) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("OnesLike", {x}, {}));
}

Output ElementCount(const Scope& scope, Output x, const std::vector<int64_t>& axes) {
  if (!scope.CheckInputs("ElementCount", {x})) return {};
  return scope.OutputOf(scope.AddNode("ElementCount", {x}, {{"axes", axes}}));
}

Output Fill(const Scope& scope, const Shape& shape, double value, DType dtype) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(
      scope.AddNode("Fill", {}, {{"shape", shape}, {"value", value}, {"dtype", dtype}}));
}

Output Empty(const Scope& scope, const Shape& shape, DType dtype) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Empty", {}, {{"shape", shape}, {"dtype", dtype}}));
}
Output AddN(const Scope& scope, const std::vector<Output>& xs) {
  internal::RegisterOpDefinitions();
  if (xs.empty()) {
    scope.UpdateStatus(InvalidArgument("AddN needs at least one input"));
    return Output();
  }
  return scope.OutputOf(scope.AddNode("AddN", xs, {}));
}

Output Reshape(const Scope& scope, Output x, const std::vector<int64_t>& shape) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Reshape", {x}, {{"shape", shape}}));
}

}  // namespace dflow::ops
