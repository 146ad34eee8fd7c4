// The definitions (shape, cost, properties) and gradients of Shape, ReshapeTo, Range, AxesShape
// and ReduceSumAxes: ops whose output shape comes from tensor values at run time.
#include "ops/array_ops.h"
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"
#include "ops/math_ops.h"
#include "ops/shape_ops.h"

namespace dflow::ops::internal {
namespace {

Status ShapeShape(InferenceContext& c) {
  const Shape& x = c.input_shape(0);
  c.set_output(0, Shape{x.unknown_rank() ? -1 : static_cast<int64_t>(x.rank())});
  return Status::OK();
}

// A rank as long as the shape vector; every dimension unknown but those the input's element
// count fixes.
Status ReshapeToShape(InferenceContext& c) {
  const Shape& s = c.input_shape(1);
  if (!s.unknown_rank() && s.rank() != 1) return c.Error("shape must be a vector, got {}", s);
  ASSIGN_OR_RETURN(auto known, c.GetAttr<std::vector<int64_t>>("known"));
  if (!known.empty()) {
    auto out = Shape::Make(known);
    if (!out.ok()) return c.Error("known dimensions: {}", out.status().message());
    if (!s.unknown_rank() && s[0] >= 0 && s[0] != out->rank()) {
      return c.Error("{} known dimensions for a shape of {}", out->rank(), s[0]);
    }
    c.set_output(0, *out);
    return Status::OK();
  }
  if (s.unknown_rank() || s[0] < 0) {
    c.set_output(0, Shape::Unknown());
    return Status::OK();
  }
  if (s[0] > Shape::kMaxRank)
    return c.Error("a shape of {} dimensions (at most {})", s[0], Shape::kMaxRank);
  std::vector<int64_t> dims(s[0], -1);
  if (s[0] == 0) {
    const int64_t n = c.input_shape(0).num_elements();
    if (n >= 0 && n != 1) return c.Error("cannot reshape {} into a scalar", c.input_shape(0));
  }
  c.set_output(0, Shape(dims));
  return Status::OK();
}

Status ScalarInputs(InferenceContext& c) {
  for (int i = 0; i < c.num_inputs(); ++i) {
    const Shape& s = c.input_shape(i);
    if (!s.unknown_rank() && s.num_elements() != 1 && s.num_elements() >= 0) {
      return c.Error("input {} must hold one value, got {}", i, s);
    }
  }
  c.set_output(0, Shape{-1});
  return Status::OK();
}

Status AxesShapeShape(InferenceContext& c) {
  const Shape& s = c.input_shape(0);
  const Shape& a = c.input_shape(1);
  for (int i = 0; i < 2; ++i) {
    const Shape& v = c.input_shape(i);
    if (!v.unknown_rank() && v.rank() != 1)
      return c.Error("input {} must be a vector, got {}", i, v);
  }
  ASSIGN_OR_RETURN(auto mode, c.GetAttr<std::string>("mode"));
  const bool known = !s.unknown_rank() && s[0] >= 0;
  if (mode == "unsqueeze") {
    const bool both = known && !a.unknown_rank() && a[0] >= 0;
    c.set_output(0, Shape{both ? s[0] + a[0] : -1});
  } else if (mode == "squeeze") {
    c.set_output(0, Shape{-1});
  } else if (mode == "reduce") {
    c.set_output(0, Shape{known ? s[0] : -1});
  } else {
    return c.Error("mode '{}' (unsqueeze, squeeze or reduce)", mode);
  }
  return Status::OK();
}

// x's rank when the dimensions are kept (which ones are reduced is known only at run time), x's
// less the axes' count when not.
Status ReduceSumAxesShape(InferenceContext& c) {
  const Shape& x = c.input_shape(0);
  const Shape& a = c.input_shape(1);
  if (!a.unknown_rank() && a.rank() != 1) return c.Error("axes must be a vector, got {}", a);
  ASSIGN_OR_RETURN(int64_t keep, c.GetAttr<int64_t>("keep_dims"));
  if (x.unknown_rank()) {
    c.set_output(0, Shape::Unknown());
  } else if (keep != 0) {
    c.set_output(0, Shape(std::vector<int64_t>(x.rank(), -1)));
  } else if (!a.unknown_rank() && a[0] > 0 && a[0] <= x.rank()) {
    c.set_output(0, Shape(std::vector<int64_t>(x.rank() - a[0], -1)));
  } else {
    c.set_output(0, Shape::Unknown());  // no axes: all of them, or none
  }
  return Status::OK();
}

// dy back to x's shape: reshaped to the kept-dimensions shape, then broadcast.
Status ReduceSumAxesGrad(GradContext& c) {
  const Scope& s = c.scope();
  ASSIGN_OR_RETURN(int64_t noop, c.node().GetAttr<int64_t>("noop_with_empty_axes"));
  Output kept = AxesShape(s, ShapeOf(s, c.input(0)), c.input(1), "reduce", noop != 0);
  c.set_input_grad(0, Add(s, ReshapeTo(s, c.grad(0), kept), ZerosLike(s, c.input(0))));
  return Status::OK();
}

Status ReshapeToGrad(GradContext& c) {
  c.set_input_grad(0, ReshapeLike(c.scope(), c.grad(0), c.input(0)));
  return Status::OK();
}

}  // namespace

Status RegisterShapeOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register({.name = "Shape",
                              .inputs = {{.name = "x", .type_attr = "T"}},
                              .outputs = {{.name = "shape", .type_attr = "out_type"}},
                              .attrs = {{"T", AttrType::kDType, std::nullopt},
                                        {"out_type", AttrType::kDType, DType::kI64}},
                              .constant_cost = true,
                              .shape_fn = ShapeShape,
                              .cost_fn = Free,
                              .grad_fn = NoGradient}));
  RETURN_IF_ERROR(
      r.Register({.name = "ReshapeTo",
                  .inputs = {{.name = "x", .type_attr = "T"},
                             {.name = "shape", .type_attr = "TS", .allowed = kIndexTypes}},
                  .outputs = {{.name = "y", .type_attr = "T"}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt},
                            {"TS", AttrType::kDType, std::nullopt},
                            {"allow_zero", AttrType::kInt, int64_t{0}},
                            {"known", AttrType::kIntList, std::vector<int64_t>{}}},
                  .constant_cost = true,
                  .shape_fn = ReshapeToShape,
                  .cost_fn = Free,
                  .grad_fn = ReshapeToGrad}));
  RETURN_IF_ERROR(
      r.Register({.name = "Range",
                  .inputs = {{.name = "start", .type_attr = "T", .allowed = kNumericTypes},
                             {.name = "limit", .type_attr = "T"},
                             {.name = "delta", .type_attr = "T"}},
                  .outputs = {{.name = "y", .type_attr = "T"}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt}},
                  .shape_fn = ScalarInputs,
                  .cost_fn = ElementwiseCostFn(1)}));
  RETURN_IF_ERROR(
      r.Register({.name = "AxesShape",
                  .inputs = {{.name = "shape", .type_attr = "TS", .allowed = {DType::kI64}},
                             {.name = "axes", .type_attr = "TA", .allowed = kIndexTypes}},
                  .outputs = {{.name = "y", .type_attr = "TS"}},
                  .attrs = {{"TS", AttrType::kDType, std::nullopt},
                            {"TA", AttrType::kDType, std::nullopt},
                            {"mode", AttrType::kString, std::nullopt},
                            {"noop_with_empty_axes", AttrType::kInt, int64_t{0}}},
                  .constant_cost = true,
                  .shape_fn = AxesShapeShape,
                  .cost_fn = Free,
                  .grad_fn = NoGradient}));
  RETURN_IF_ERROR(
      r.Register({.name = "ReduceSumAxes",
                  .inputs = {{.name = "x", .type_attr = "T", .allowed = kNumericTypes},
                             {.name = "axes", .type_attr = "TA", .allowed = kIndexTypes}},
                  .outputs = {{.name = "y", .type_attr = "T"}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt},
                            {"TA", AttrType::kDType, std::nullopt},
                            {"keep_dims", AttrType::kInt, int64_t{1}},
                            {"noop_with_empty_axes", AttrType::kInt, int64_t{0}}},
                  .shape_fn = ReduceSumAxesShape,
                  .cost_fn = ElementwiseCostFn(1),
                  .grad_fn = ReduceSumAxesGrad}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
