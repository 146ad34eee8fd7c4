#include "ops/conv_ops.h"

#include <limits>

#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/op_definitions.h"

namespace dflow::ops {
namespace {

AttrMap ConvAttrMap(const Conv2DAttrs& a) {
  return {
      {"strides", a.strides}, {"pads", a.pads}, {"dilations", a.dilations}, {"groups", a.groups}};
}
AttrMap PoolAttrMap(const PoolAttrs& a) {
  return {{"ksize", a.ksize}, {"strides", a.strides}, {"pads", a.pads}};
}

}  // namespace

Output Conv2D(const Scope& scope, Output x, Output w, const Conv2DAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Conv2D", {x, w}, ConvAttrMap(attrs)));
}
Output Conv2DBackpropInput(const Scope& scope, Output dy, Output w, Output x_like,
                           const Conv2DAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Conv2DBackpropInput", {dy, w, x_like}, ConvAttrMap(attrs)));
}
Output Conv2DBackpropFilter(const Scope& scope, Output x, Output dy, Output w_like,
                            const Conv2DAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Conv2DBackpropFilter", {x, dy, w_like}, ConvAttrMap(attrs)));
}
Output MaxPool(const Scope& scope, Output x, const PoolAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("MaxPool", {x}, PoolAttrMap(attrs)));
}
Output AvgPool(const Scope& scope, Output x, const PoolAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("AvgPool", {x}, PoolAttrMap(attrs)));
}
Output MaxPoolGrad(const Scope& scope, Output x, Output dy, const PoolAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("MaxPoolGrad", {x, dy}, PoolAttrMap(attrs)));
}
Output AvgPoolGrad(const Scope& scope, Output x, Output dy, const PoolAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("AvgPoolGrad", {x, dy}, PoolAttrMap(attrs)));
}
Output GlobalAvgPool(const Scope& scope, Output x) {
  return ReduceMean(scope, x, {2, 3}, {.keep_dims = true});
}
Output Flatten(const Scope& scope, Output x) {
  if (!scope.CheckInputs("Flatten", {x})) return Output();
  const Shape& s = x.shape();
  int64_t rest = 1;
  for (int i = 1; i < s.rank(); ++i) rest *= s[i];
  if (s.unknown_rank() || s.rank() < 1 || rest < 0) {
    scope.UpdateStatus(
        InvalidArgument("Flatten: '{}' has shape {}; all but the first dimension "
                        "must be known",
                        x.name(), s));
    return Output();
  }
  return Reshape(scope, x, {-1, rest});
}

}  // namespace dflow::ops
