// The definitions (shape, cost, properties) and gradient of Resize and ResizeGrad.
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"
#include "ops/image_ops.h"

namespace dflow::ops::internal {
namespace {

std::vector<AttrDef> ResizeAttrDefs(bool with_known) {
  std::vector<AttrDef> a = {
      {"T", AttrType::kDType, std::nullopt},
      {"mode", AttrType::kString, std::string("nearest")},
      {"coordinate_transformation_mode", AttrType::kString, std::string("half_pixel")},
      {"nearest_mode", AttrType::kString, std::string("round_prefer_floor")},
      {"cubic_coeff_a", AttrType::kFloat, -0.75},
      {"exclude_outside", AttrType::kInt, int64_t{0}},
      {"extrapolation_value", AttrType::kFloat, 0.0}};
  if (with_known) a.push_back({"known", AttrType::kIntList, std::vector<int64_t>{}});
  return a;
}

// The modes, and the roi, scales and sizes (inputs `first` .. first + 2) vectors.
Status CheckModes(InferenceContext& c, int first) {
  ASSIGN_OR_RETURN(auto mode, c.GetAttr<std::string>("mode"));
  if (mode != "nearest" && mode != "linear" && mode != "cubic") {
    return c.Error("mode '{}' (nearest, linear or cubic)", mode);
  }
  ASSIGN_OR_RETURN(auto ct, c.GetAttr<std::string>("coordinate_transformation_mode"));
  if (ct != "half_pixel" && ct != "pytorch_half_pixel" && ct != "align_corners" &&
      ct != "asymmetric" && ct != "tf_crop_and_resize" && ct != "tf_half_pixel_for_nn") {
    return c.Error("coordinate_transformation_mode '{}'", ct);
  }
  ASSIGN_OR_RETURN(auto nm, c.GetAttr<std::string>("nearest_mode"));
  if (nm != "round_prefer_floor" && nm != "round_prefer_ceil" && nm != "floor" && nm != "ceil") {
    return c.Error("nearest_mode '{}'", nm);
  }
  for (int i = first; i < first + 3 && i < c.num_inputs(); ++i) {
    const Shape& v = c.input_shape(i);
    if (!v.unknown_rank() && v.rank() != 1)
      return c.Error("input {} must be a vector, got {}", i, v);
  }
  return Status::OK();
}

// x's rank, the dimensions known before the run when the builder gave them.
Status ResizeShape(InferenceContext& c) {
  RETURN_IF_ERROR(CheckModes(c, 1));
  const Shape& x = c.input_shape(0);
  ASSIGN_OR_RETURN(auto known, c.GetAttr<std::vector<int64_t>>("known"));
  if (!known.empty()) {
    if (!x.unknown_rank() && static_cast<int>(known.size()) != x.rank()) {
      return c.Error("{} known dimensions for an input of rank {}", known.size(), x.rank());
    }
    auto out = Shape::Make(known);
    if (!out.ok()) return c.Error("known dimensions: {}", out.status().message());
    c.set_output(0, *out);
    return Status::OK();
  }
  c.set_output(0, x.unknown_rank() ? Shape::Unknown() : Shape(std::vector<int64_t>(x.rank(), -1)));
  return Status::OK();
}

Status ResizeGradShape(InferenceContext& c) {
  RETURN_IF_ERROR(CheckModes(c, 2));
  c.set_output(0, c.input_shape(1));
  return Status::OK();
}

Status ResizeGradFn(GradContext& c) {
  ResizeAttrs a;
  const Node& n = c.node();
  ASSIGN_OR_RETURN(a.mode, n.GetAttr<std::string>("mode"));
  ASSIGN_OR_RETURN(a.coordinate_transformation_mode,
                   n.GetAttr<std::string>("coordinate_transformation_mode"));
  ASSIGN_OR_RETURN(a.nearest_mode, n.GetAttr<std::string>("nearest_mode"));
  ASSIGN_OR_RETURN(a.cubic_coeff_a, n.GetAttr<double>("cubic_coeff_a"));
  ASSIGN_OR_RETURN(int64_t exclude, n.GetAttr<int64_t>("exclude_outside"));
  a.exclude_outside = exclude != 0;
  ASSIGN_OR_RETURN(a.extrapolation_value, n.GetAttr<double>("extrapolation_value"));
  c.set_input_grad(
      0, ResizeGrad(c.scope(), c.grad(0), c.input(0), c.input(1), c.input(2), c.input(3), a));
  return Status::OK();
}

std::vector<ArgDef> ResizeOperands() {
  return {{.name = "roi", .fixed = DType::kF32},
          {.name = "scales", .fixed = DType::kF32},
          {.name = "sizes", .fixed = DType::kI64}};
}

}  // namespace

Status RegisterImageOps(OpRegistry& r) {
  std::vector<ArgDef> in = {{.name = "x", .type_attr = "T", .allowed = kFloatTypes}};
  for (const auto& a : ResizeOperands()) in.push_back(a);
  RETURN_IF_ERROR(r.Register({.name = "Resize",
                              .inputs = in,
                              .outputs = {{.name = "y", .type_attr = "T"}},
                              .attrs = ResizeAttrDefs(true),
                              .shape_fn = ResizeShape,
                              .cost_fn = ElementwiseCostFn(8),
                              .grad_fn = ResizeGradFn}));
  std::vector<ArgDef> grad_in = {{.name = "dy", .type_attr = "T", .allowed = kFloatTypes},
                                 {.name = "x_like", .type_attr = "T"}};
  for (const auto& a : ResizeOperands()) grad_in.push_back(a);
  RETURN_IF_ERROR(r.Register({.name = "ResizeGrad",
                              .inputs = grad_in,
                              .outputs = {{.name = "dx", .type_attr = "T"}},
                              .attrs = ResizeAttrDefs(false),
                              .shape_fn = ResizeGradShape,
                              .cost_fn = ElementwiseCostFn(8)}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
