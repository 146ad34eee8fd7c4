#include "ops/manip_ops.h"

#include "ops/op_definitions.h"

namespace dflow::ops {

Output Transpose(const Scope& scope, Output x, const std::vector<int64_t>& perm) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Transpose", {x}, {{"perm", perm}}));
}
Output Concat(const Scope& scope, const std::vector<Output>& xs, int64_t axis) {
  internal::RegisterOpDefinitions();
  if (xs.empty()) {
    scope.UpdateStatus(InvalidArgument("Concat needs at least one input"));
    return Output();
  }
  return scope.OutputOf(scope.AddNode("Concat", xs, {{"axis", axis}}));
}
Output WriteRows(const Scope& scope, Output x, Output y, int64_t offset) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("WriteRows", {x, y}, {{"offset", offset}}));
}
std::vector<Output> SplitV(const Scope& scope, Output x, const std::vector<int64_t>& sizes,
                           int64_t axis) {
  internal::RegisterOpDefinitions();
  auto num = static_cast<int64_t>(sizes.size());
  int id = scope.AddNode("Split", {x}, {{"axis", axis}, {"num_split", num}, {"sizes", sizes}});
  std::vector<Output> outs;
  for (int64_t i = 0; i < num; ++i) outs.push_back(scope.OutputOf(id, static_cast<int>(i)));
  return id < 0 ? std::vector<Output>() : outs;
}
std::vector<Output> Split(const Scope& scope, Output x, int64_t num_split, int64_t axis) {
  internal::RegisterOpDefinitions();
  int id = scope.AddNode("Split", {x}, {{"axis", axis}, {"num_split", num_split}});
  std::vector<Output> outs;
  for (int64_t i = 0; id >= 0 && i < num_split; ++i) {
    outs.push_back(scope.OutputOf(id, static_cast<int>(i)));
  }
  return outs;
}
Output Slice(const Scope& scope, Output x, const std::vector<int64_t>& begin,
             const std::vector<int64_t>& size) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Slice", {x}, {{"begin", begin}, {"size", size}}));
}
Output Pad(const Scope& scope, Output x, const std::vector<int64_t>& paddings, double value) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Pad", {x}, {{"paddings", paddings}, {"value", value}}));
}
Output OneHot(const Scope& scope, Output indices, int64_t depth, DType dtype) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("OneHot", {indices}, {{"depth", depth}, {"dtype", dtype}}));
}
Output CheckNumerics(const Scope& scope, Output x, const std::string& message) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("CheckNumerics", {x}, {{"message", message}}));
}

}  // namespace dflow::ops
