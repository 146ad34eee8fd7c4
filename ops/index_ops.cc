#include "ops/index_ops.h"

#include "ops/op_definitions.h"

namespace dflow::ops {

Output Gather(const Scope& scope, Output x, Output indices, int64_t axis) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Gather", {x, indices}, {{"axis", axis}}));
}
Output GatherElements(const Scope& scope, Output x, Output indices, int64_t axis) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("GatherElements", {x, indices}, {{"axis", axis}}));
}
Output ScatterElements(const Scope& scope, Output x, Output indices, Output updates, int64_t axis,
                       const std::string& reduction) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("ScatterElements", {x, indices, updates},
                                      {{"axis", axis}, {"reduction", reduction}}));
}
Output GatherGrad(const Scope& scope, Output like, Output indices, Output grad, int64_t axis) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("GatherGrad", {like, indices, grad}, {{"axis", axis}}));
}

}  // namespace dflow::ops
