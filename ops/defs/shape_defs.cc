// The definitions (shape, cost, properties) and gradients of Shape, ReshapeTo and Range: ops
// whose output shape comes from tensor values at run time.
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"
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
  return Status::OK();
}

}  // namespace dflow::ops::internal
