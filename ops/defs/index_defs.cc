// The definitions (shape, cost, properties) and gradients of the indexing ops: Gather,
// GatherGrad, GatherElements and ScatterElements.
#include "ops/array_ops.h"
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"
#include "ops/index_ops.h"

namespace dflow::ops::internal {
namespace {

// `axis` of the node, checked against a rank (unknown: -1) and made non-negative.
Result<int64_t> AxisOf(InferenceContext& c, int rank) {
  ASSIGN_OR_RETURN(int64_t axis, c.GetAttr<int64_t>("axis"));
  if (rank < 0) return axis;
  if (axis < -rank || axis >= rank) {
    return c.Error("axis {} is out of range for an input of rank {}", axis, rank);
  }
  return axis < 0 ? axis + rank : axis;
}

Status GatherShape(InferenceContext& c) {
  const Shape& x = c.input_shape(0);
  const Shape& i = c.input_shape(1);
  if (!x.unknown_rank() && x.rank() == 0) return c.Error("cannot gather from a scalar");
  ASSIGN_OR_RETURN(int64_t axis, AxisOf(c, x.unknown_rank() ? -1 : x.rank()));
  if (x.unknown_rank() || i.unknown_rank()) {
    c.set_output(0, Shape::Unknown());
    return Status::OK();
  }
  if (x.rank() - 1 + i.rank() > Shape::kMaxRank) {
    return c.Error("the output's rank {} exceeds {}", x.rank() - 1 + i.rank(), Shape::kMaxRank);
  }
  std::vector<int64_t> dims(x.dims().begin(), x.dims().begin() + axis);
  dims.insert(dims.end(), i.dims().begin(), i.dims().end());
  dims.insert(dims.end(), x.dims().begin() + axis + 1, x.dims().end());
  c.set_output(0, Shape(dims));
  return Status::OK();
}

// GatherElements' and ScatterElements': indices of x's rank, no larger than x off the axis.
Status CheckElementIndices(InferenceContext& c, const Shape& x, const Shape& i, int64_t axis) {
  if (x.unknown_rank() || i.unknown_rank()) return Status::OK();
  if (i.rank() != x.rank()) {
    return c.Error("indices {} must have the rank of the input {}", i, x);
  }
  for (int d = 0; d < x.rank(); ++d) {
    if (d != axis && x[d] >= 0 && i[d] > x[d]) {
      return c.Error("indices {} exceed the input {} in dimension {}", i, x, d);
    }
  }
  return Status::OK();
}

Status GatherElementsShape(InferenceContext& c) {
  const Shape& x = c.input_shape(0);
  if (!x.unknown_rank() && x.rank() == 0) return c.Error("cannot gather from a scalar");
  ASSIGN_OR_RETURN(int64_t axis, AxisOf(c, x.unknown_rank() ? -1 : x.rank()));
  RETURN_IF_ERROR(CheckElementIndices(c, x, c.input_shape(1), axis));
  c.set_output(0, c.input_shape(1));
  return Status::OK();
}

Status ScatterElementsShape(InferenceContext& c) {
  const Shape& x = c.input_shape(0);
  if (!x.unknown_rank() && x.rank() == 0) return c.Error("cannot scatter into a scalar");
  ASSIGN_OR_RETURN(int64_t axis, AxisOf(c, x.unknown_rank() ? -1 : x.rank()));
  ASSIGN_OR_RETURN(std::string reduction, c.GetAttr<std::string>("reduction"));
  if (reduction != "none" && reduction != "add" && reduction != "mul") {
    return c.Error("reduction '{}' (none, add or mul)", reduction);
  }
  const Shape& i = c.input_shape(1);
  const Shape& u = c.input_shape(2);
  RETURN_IF_ERROR(CheckElementIndices(c, x, i, axis));
  if (!i.unknown_rank() && !u.unknown_rank() && !i.IsCompatibleWith(u) && !u.IsCompatibleWith(i)) {
    return c.Error("updates {} must have the shape of the indices {}", u, i);
  }
  c.set_output(0, x);
  return Status::OK();
}

Status GatherGradShape(InferenceContext& c) {
  const Shape& x = c.input_shape(0);
  ASSIGN_OR_RETURN(int64_t axis, AxisOf(c, x.unknown_rank() ? -1 : x.rank()));
  (void)axis;
  c.set_output(0, x);
  return Status::OK();
}

Status GatherGradFn(GradContext& c) {
  ASSIGN_OR_RETURN(int64_t axis, c.node().GetAttr<int64_t>("axis"));
  c.set_input_grad(0, GatherGrad(c.scope(), c.input(0), c.input(1), c.grad(0), axis));
  return Status::OK();
}

// GatherGrad is linear in its gradient input: its own gradient gathers again.
Status GatherGradGradFn(GradContext& c) {
  ASSIGN_OR_RETURN(int64_t axis, c.node().GetAttr<int64_t>("axis"));
  c.set_input_grad(2, Gather(c.scope(), c.grad(0), c.input(1), axis));
  return Status::OK();
}

Status GatherElementsGrad(GradContext& c) {
  ASSIGN_OR_RETURN(int64_t axis, c.node().GetAttr<int64_t>("axis"));
  const Scope& s = c.scope();
  c.set_input_grad(
      0, ScatterElements(s, ZerosLike(s, c.input(0)), c.input(1), c.grad(0), axis, "add"));
  return Status::OK();
}

Status ScatterElementsGrad(GradContext& c) {
  ASSIGN_OR_RETURN(int64_t axis, c.node().GetAttr<int64_t>("axis"));
  ASSIGN_OR_RETURN(std::string reduction, c.node().GetAttr<std::string>("reduction"));
  if (reduction == "mul") {
    return InvalidArgument("node '{}': ScatterElements with reduction 'mul' has no gradient",
                           c.node().name());
  }
  const Scope& s = c.scope();
  // Replaced elements take no gradient from the output; added ones pass it on.
  c.set_input_grad(0, reduction == "add" ? c.grad(0)
                                         : ScatterElements(s, c.grad(0), c.input(1),
                                                           ZerosLike(s, c.input(2)), axis));
  c.set_input_grad(2, GatherElements(s, c.grad(0), c.input(1), axis));
  return Status::OK();
}

}  // namespace

Status RegisterIndexOps(OpRegistry& r) {
  RETURN_IF_ERROR(
      r.Register({.name = "Gather",
                  .inputs = {{.name = "x", .type_attr = "T", .allowed = kConvertTypes},
                             {.name = "indices", .type_attr = "TI", .allowed = kIndexTypes}},
                  .outputs = {{.name = "y", .type_attr = "T"}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt},
                            {"TI", AttrType::kDType, std::nullopt},
                            {"axis", AttrType::kInt, int64_t{0}}},
                  .shape_fn = GatherShape,
                  .cost_fn = ElementwiseCostFn(0),
                  .grad_fn = GatherGradFn}));
  RETURN_IF_ERROR(
      r.Register({.name = "GatherGrad",
                  .inputs = {{.name = "like", .type_attr = "T", .allowed = kFloatTypes},
                             {.name = "indices", .type_attr = "TI", .allowed = kIndexTypes},
                             {.name = "grad", .type_attr = "T"}},
                  .outputs = {{.name = "y", .type_attr = "T"}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt},
                            {"TI", AttrType::kDType, std::nullopt},
                            {"axis", AttrType::kInt, int64_t{0}}},
                  .shape_fn = GatherGradShape,
                  .cost_fn = ElementwiseCostFn(1),
                  .grad_fn = GatherGradGradFn}));
  RETURN_IF_ERROR(
      r.Register({.name = "GatherElements",
                  .inputs = {{.name = "x", .type_attr = "T", .allowed = kConvertTypes},
                             {.name = "indices", .type_attr = "TI", .allowed = kIndexTypes}},
                  .outputs = {{.name = "y", .type_attr = "T"}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt},
                            {"TI", AttrType::kDType, std::nullopt},
                            {"axis", AttrType::kInt, int64_t{0}}},
                  .shape_fn = GatherElementsShape,
                  .cost_fn = ElementwiseCostFn(0),
                  .grad_fn = GatherElementsGrad}));
  RETURN_IF_ERROR(
      r.Register({.name = "ScatterElements",
                  .inputs = {{.name = "x", .type_attr = "T", .allowed = kConvertTypes},
                             {.name = "indices", .type_attr = "TI", .allowed = kIndexTypes},
                             {.name = "updates", .type_attr = "T"}},
                  .outputs = {{.name = "y", .type_attr = "T"}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt},
                            {"TI", AttrType::kDType, std::nullopt},
                            {"axis", AttrType::kInt, int64_t{0}},
                            {"reduction", AttrType::kString, std::string("none")}},
                  .shape_fn = ScatterElementsShape,
                  .cost_fn = ElementwiseCostFn(1),
                  .grad_fn = ScatterElementsGrad}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
