// The definitions (shape, cost, properties) and gradients of Placeholder, Const, Identity, Reshape,
// Fill, AddN and their kin.
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"

namespace dflow::ops::internal {
namespace {

Status PlaceholderShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(Shape s, c.GetAttr<Shape>("shape"));
  c.set_output(0, s);
  return Status::OK();
}

Status ConstShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(Tensor v, c.GetAttr<Tensor>("value"));
  if (!v.valid()) return c.Error("attribute 'value' is an empty tensor");
  if (v.dtype() != c.output_dtype(0)) {
    return c.Error("attribute 'value' is {} but attribute 'dtype' is {}", v.dtype(),
                   c.output_dtype(0));
  }
  c.set_output(0, v.shape());
  return Status::OK();
}

Status IdentityShape(InferenceContext& c) {
  c.set_output(0, c.input_shape(0));
  return Status::OK();
}

Status ReshapeShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(auto dims, c.GetAttr<std::vector<int64_t>>("shape"));
  auto target = Shape::Make(dims);
  if (!target.ok()) return c.Error("attribute 'shape': {}", target.status().message());
  int unknown = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (unknown >= 0) return c.Error("shape {} has more than one -1", *target);
      unknown = static_cast<int>(i);
    } else if (__builtin_mul_overflow(known, dims[i], &known)) {
      return c.Error("shape {} has more elements than 64 bits count", *target);
    }
  }
  Shape out = *target;
  int64_t n = c.input_shape(0).num_elements();
  if (n >= 0) {
    if (unknown >= 0) {
      if (known == 0 || n % known != 0) {
        return c.Error("cannot reshape {} ({} elements) into {}", c.input_shape(0), n, *target);
      }
      out.set_dim(unknown, n / known);
    } else if (known != n) {
      return c.Error("cannot reshape {} ({} elements) into {} ({} elements)", c.input_shape(0), n,
                     *target, known);
    }
  }
  c.set_output(0, out);
  return Status::OK();
}

Status FillShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(Shape s, c.GetAttr<Shape>("shape"));
  if (!s.fully_defined()) return c.Error("shape must be fully defined, got {}", s);
  c.set_output(0, s);
  return Status::OK();
}

// A scalar; the axes, where the rank is known, must be in range.
Status ElementCountShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(auto axes, c.GetAttr<std::vector<int64_t>>("axes"));
  const Shape& x = c.input_shape(0);
  if (!x.unknown_rank()) {
    for (int64_t a : axes) {
      if (a < -x.rank() || a >= x.rank()) {
        return c.Error("axis {} is out of range for input of rank {}", a, x.rank());
      }
    }
  }
  c.set_output(0, Shape{});
  return Status::OK();
}

Status AddNShape(InferenceContext& c) {
  Shape out = c.input_shape(0);
  for (int i = 1; i < c.num_inputs(); ++i) {
    const Shape& s = c.input_shape(i);
    if (!out.IsCompatibleWith(s)) {
      return c.Error("input {} has shape {} but input 0 has shape {}", i, s, c.input_shape(0));
    }
    if (out.unknown_rank()) out = s;
  }
  c.set_output(0, out);
  return Status::OK();
}

Status IdentityGrad(GradContext& c) {
  c.set_input_grad(0, c.grad(0));
  return Status::OK();
}
Status ReshapeGrad(GradContext& c) {
  c.set_input_grad(0, ReshapeLike(c.scope(), c.grad(0), c.input(0)));
  return Status::OK();
}
Status AddNGrad(GradContext& c) {
  for (int i = 0; i < c.num_inputs(); ++i) c.set_input_grad(i, c.grad(0));
  return Status::OK();
}

}  // namespace

Status RegisterArrayOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register({.name = "Placeholder",
                              .outputs = {{.name = "output", .type_attr = "dtype"}},
                              .attrs = {{"dtype", AttrType::kDType, std::nullopt},
                                        {"shape", AttrType::kShape, Shape::Unknown()}},
                              .constant_cost = true,
                              .role = OpRole::kPlaceholder,
                              .shape_fn = PlaceholderShape,
                              .cost_fn = Free}));
  RETURN_IF_ERROR(r.Register({.name = "Const",
                              .outputs = {{.name = "output", .type_attr = "dtype"}},
                              .attrs = {{"value", AttrType::kTensor, std::nullopt},
                                        {"dtype", AttrType::kDType, std::nullopt}},
                              .constant_cost = true,
                              .shape_fn = ConstShape,
                              .cost_fn = Free}));
  RETURN_IF_ERROR(r.Register({.name = "Identity",
                              .inputs = {{.name = "input", .type_attr = "T"}},
                              .outputs = {{.name = "output", .type_attr = "T"}},
                              .attrs = {{"T", AttrType::kDType, std::nullopt}},
                              .constant_cost = true,
                              .shape_fn = IdentityShape,
                              .cost_fn = Free,
                              .grad_fn = IdentityGrad}));
  RETURN_IF_ERROR(r.Register({.name = "NoOp",
                              .constant_cost = true,
                              .role = OpRole::kNoOp,
                              .shape_fn = [](InferenceContext&) { return Status::OK(); },
                              .cost_fn = Free}));
  RETURN_IF_ERROR(r.Register({.name = "Reshape",
                              .inputs = {{.name = "input", .type_attr = "T"}},
                              .outputs = {{.name = "output", .type_attr = "T"}},
                              .attrs = {{"T", AttrType::kDType, std::nullopt},
                                        {"shape", AttrType::kIntList, std::nullopt}},
                              .constant_cost = true,
                              .shape_fn = ReshapeShape,
                              .cost_fn = Free,
                              .grad_fn = ReshapeGrad}));
  for (const char* name : {"ZerosLike", "OnesLike"}) {
    RETURN_IF_ERROR(r.Register({.name = name,
                                .inputs = {{.name = "x", .type_attr = "T", .allowed = kCastTypes}},
                                .outputs = {{.name = "y", .type_attr = "T"}},
                                .attrs = {{"T", AttrType::kDType, std::nullopt}},
                                .shape_fn = IdentityShape,
                                .cost_fn = ElementwiseCostFn(0),
                                .grad_fn = NoGradient}));  // values do not matter
  }
  // The number of x's elements along `axes` (all of them when empty), as a scalar of x's dtype:
  // what a mean divides by when the shape is known only at run time (batch norm's unbiased
  // variance). It reads x's shape, never its values.
  RETURN_IF_ERROR(r.Register({.name = "ElementCount",
                              .inputs = {{.name = "x", .type_attr = "T", .allowed = kNumericTypes}},
                              .outputs = {{.name = "count", .type_attr = "T"}},
                              .attrs = {{"T", AttrType::kDType, std::nullopt},
                                        {"axes", AttrType::kIntList, std::vector<int64_t>{}}},
                              .constant_cost = true,
                              .shape_fn = ElementCountShape,
                              .cost_fn = Free,
                              .grad_fn = NoGradient}));
  RETURN_IF_ERROR(
      r.Register({.name = "Fill",
                  .outputs = {{.name = "y", .type_attr = "dtype", .allowed = kCastTypes}},
                  .attrs = {{"shape", AttrType::kShape, std::nullopt},
                            {"value", AttrType::kFloat, 0.0},
                            {"dtype", AttrType::kDType, DType::kF32}},
                  .shape_fn = FillShape,
                  .cost_fn = ElementwiseCostFn(0)}));
  RETURN_IF_ERROR(
      r.Register({.name = "Empty",
                  .outputs = {{.name = "y", .type_attr = "dtype", .allowed = kCastTypes}},
                  .attrs = {{"shape", AttrType::kShape, std::nullopt},
                            {"dtype", AttrType::kDType, DType::kF32}},
                  .shape_fn = FillShape,
                  .cost_fn = ElementwiseCostFn(0)}));
  RETURN_IF_ERROR(r.Register(
      {.name = "AddN",
       .inputs = {{.name = "inputs", .type_attr = "T", .allowed = kNumericTypes, .variadic = true}},
       .outputs = {{.name = "sum", .type_attr = "T"}},
       .attrs = {{"T", AttrType::kDType, std::nullopt}},
       .shape_fn = AddNShape,
       .cost_fn = ElementwiseCostFn(1),
       .grad_fn = AddNGrad}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
