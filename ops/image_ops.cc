#include "ops/image_ops.h"

#include "ops/op_definitions.h"

namespace dflow::ops {
namespace {

AttrMap ResizeAttrMap(const ResizeAttrs& a) {
  return {{"mode", a.mode},
          {"coordinate_transformation_mode", a.coordinate_transformation_mode},
          {"nearest_mode", a.nearest_mode},
          {"cubic_coeff_a", a.cubic_coeff_a},
          {"exclude_outside", int64_t{a.exclude_outside}},
          {"extrapolation_value", a.extrapolation_value},
          {"known", a.known}};
}

}  // namespace

Output Resize(const Scope& scope, Output x, Output roi, Output scales, Output sizes,
              const ResizeAttrs& attrs) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode("Resize", {x, roi, scales, sizes}, ResizeAttrMap(attrs)));
}

Output ResizeGrad(const Scope& scope, Output dy, Output x_like, Output roi, Output scales,
                  Output sizes, const ResizeAttrs& attrs) {
  internal::RegisterOpDefinitions();
  AttrMap a = ResizeAttrMap(attrs);
  a.erase("known");
  return scope.OutputOf(scope.AddNode("ResizeGrad", {dy, x_like, roi, scales, sizes}, a));
}

}  // namespace dflow::ops
