#include "ops/shape_ops.h"

#include "ops/op_definitions.h"

namespace dflow::ops {

Output ShapeOf(const Scope& scope, Output x) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Shape", {x}, {}));
}
Output ReshapeTo(const Scope& scope, Output x, Output shape, bool allow_zero,
                 const std::vector<int64_t>& known) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode(
      "ReshapeTo", {x, shape}, {{"allow_zero", int64_t{allow_zero ? 1 : 0}}, {"known", known}}));
}
Output Range(const Scope& scope, Output start, Output limit, Output delta) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Range", {start, limit, delta}, {}));
}

Output AxesShape(const Scope& scope, Output shape, Output axes, const std::string& mode,
                 bool noop_with_empty_axes) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(
      scope.AddNode("AxesShape", {shape, axes},
                    {{"mode", mode}, {"noop_with_empty_axes", int64_t{noop_with_empty_axes}}}));
}
Output ReduceSumAxes(const Scope& scope, Output x, Output axes, bool keep_dims,
                     bool noop_with_empty_axes) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("ReduceSumAxes", {x, axes},
                                      {{"keep_dims", int64_t{keep_dims}},
                                       {"noop_with_empty_axes", int64_t{noop_with_empty_axes}}}));
}

}  // namespace dflow::ops
