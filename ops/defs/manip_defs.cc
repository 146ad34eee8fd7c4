// The definitions (shape, cost, properties) and gradients of the shape-manipulating ops (Concat,
// Split, Slice, Transpose, ...).
#include "ops/array_ops.h"
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"
#include "ops/manip_ops.h"
#include "ops/split_sizes.h"

namespace dflow::ops::internal {
namespace {

Status TransposeShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(auto perm, c.GetAttr<std::vector<int64_t>>("perm"));
  const Shape& x = c.input_shape(0);
  if (x.unknown_rank()) {
    c.set_output(0, Shape::Unknown());
    return Status::OK();
  }
  if (static_cast<int>(perm.size()) != x.rank()) {
    return c.Error("perm has {} entries for an input of rank {}", perm.size(), x.rank());
  }
  std::vector<bool> seen(x.rank(), false);
  std::vector<int64_t> dims;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.rank() || seen[p]) {
      return c.Error("perm {} is not a permutation of 0..{}", AttrValueString(perm), x.rank() - 1);
    }
    seen[p] = true;
    dims.push_back(x[p]);
  }
  c.set_output(0, Shape(dims));
  return Status::OK();
}

Status TransposeGrad(GradContext& c) {
  ASSIGN_OR_RETURN(auto perm, c.node().GetAttr<std::vector<int64_t>>("perm"));
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  c.set_input_grad(0, Transpose(c.scope(), c.grad(0), inverse));
  return Status::OK();
}

Status ConcatShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(int64_t axis, c.GetAttr<int64_t>("axis"));
  const Shape& first = c.input_shape(0);
  if (first.unknown_rank()) return c.Error("inputs must have known rank");
  int rank = first.rank();
  if (axis < -rank || axis >= rank)
    return c.Error("axis {} is out of range for rank {}", axis, rank);
  if (axis < 0) axis += rank;
  std::vector<int64_t> dims = first.dim_vector();
  for (int i = 1; i < c.num_inputs(); ++i) {
    const Shape& s = c.input_shape(i);
    if (s.unknown_rank() || s.rank() != rank) {
      return c.Error("input {} has shape {}, input 0 has {}", i, s, first);
    }
    for (int d = 0; d < rank; ++d) {
      if (d == axis) {
        dims[d] = dims[d] < 0 || s[d] < 0 ? -1 : dims[d] + s[d];
      } else if (dims[d] >= 0 && s[d] >= 0 && dims[d] != s[d]) {
        return c.Error("input {} has shape {}, input 0 has {}: dimension {} differs", i, s, first,
                       d);
      }
    }
  }
  c.set_output(0, Shape(dims));
  return Status::OK();
}

// Rows of `y` fit into `x` from row `offset`, as far as the shapes are known.
Status CheckRowsShape(InferenceContext& c, const Shape& x, const Shape& y, int64_t offset) {
  if (x.unknown_rank() || y.unknown_rank()) return Status::OK();
  if (x.rank() == 0 || x.rank() != y.rank()) {
    return c.Error("rows of {} cannot go into {}: the ranks must agree and be at least 1", y, x);
  }
  for (int d = 1; d < x.rank(); ++d) {
    if (x[d] >= 0 && y[d] >= 0 && x[d] != y[d]) {
      return c.Error("rows of {} cannot go into {}: dimension {} differs", y, x, d);
    }
  }
  if (offset < 0 || (x[0] >= 0 && y[0] >= 0 && offset + y[0] > x[0])) {
    return c.Error("rows [{}, {}) are outside the {} rows of {}", offset,
                   offset + std::max<int64_t>(y[0], 0), x[0], x);
  }
  return Status::OK();
}

Status WriteRowsShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(int64_t offset, c.GetAttr<int64_t>("offset"));
  RETURN_IF_ERROR(CheckRowsShape(c, c.input_shape(0), c.input_shape(1), offset));
  c.set_output(0, c.input_shape(0));
  return Status::OK();
}

// z is x; rows is the shape of the ys, which must agree with each other and fit as WriteRows'.
Status WriteRowsSumShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(int64_t offset, c.GetAttr<int64_t>("offset"));
  Shape y = c.input_shape(1);
  for (int i = 2; i < c.num_inputs(); ++i) {
    const Shape& s = c.input_shape(i);
    if (!y.IsCompatibleWith(s)) {
      return c.Error("input {} has shape {} but input 1 has shape {}", i, s, c.input_shape(1));
    }
    if (y.unknown_rank()) y = s;
  }
  RETURN_IF_ERROR(CheckRowsShape(c, c.input_shape(0), y, offset));
  c.set_output(0, c.input_shape(0));
  c.set_output(1, y);
  return Status::OK();
}

// Each input's gradient is its slice of g; the sizes along the axis must be known.
Status ConcatGrad(GradContext& c) {
  ASSIGN_OR_RETURN(int64_t axis, c.node().GetAttr<int64_t>("axis"));
  int rank = c.input(0).shape().rank();
  if (axis < 0) axis += rank;
  int64_t offset = 0;
  for (int i = 0; i < c.num_inputs(); ++i) {
    const Shape& s = c.input(i).shape();
    if (s[axis] < 0) {
      return InvalidArgument("node '{}': Concat's gradient needs each input's size along axis {}",
                             c.node().name(), axis);
    }
    std::vector<int64_t> begin(rank, 0), size(rank, -1);
    begin[axis] = offset;
    size[axis] = s[axis];
    offset += s[axis];
    if (c.wanted(i)) c.set_input_grad(i, Slice(c.scope(), c.grad(0), begin, size));
  }
  return Status::OK();
}

Status SplitShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(int64_t axis, c.GetAttr<int64_t>("axis"));
  ASSIGN_OR_RETURN(int64_t num_split, c.GetAttr<int64_t>("num_split"));
  ASSIGN_OR_RETURN(auto sizes, c.GetAttr<std::vector<int64_t>>("sizes"));
  const Shape& x = c.input_shape(0);
  if (x.unknown_rank()) return c.Error("input must have known rank");
  int rank = x.rank();
  if (axis < -rank || axis >= rank)
    return c.Error("axis {} is out of range for rank {}", axis, rank);
  if (axis < 0) axis += rank;
  auto pieces = SplitSizes(x[axis], num_split, sizes);
  if (!pieces.ok()) return c.Error("{} (input {})", pieces.status().message(), x);
  std::vector<int64_t> dims = x.dim_vector();
  for (int64_t i = 0; i < num_split; ++i) {
    dims[axis] = (*pieces)[i];
    c.set_output(static_cast<int>(i), Shape(dims));
  }
  return Status::OK();
}

// The gradient of x is the pieces' gradients joined again, zeros for pieces without one.
Status SplitGrad(GradContext& c) {
  ASSIGN_OR_RETURN(int64_t axis, c.node().GetAttr<int64_t>("axis"));
  int num = c.node().num_outputs();
  std::vector<Output> parts;
  for (int i = 0; i < num; ++i) {
    parts.push_back(c.grad(i).valid() ? c.grad(i) : ZerosLike(c.scope(), c.output(i)));
  }
  c.set_input_grad(0, Concat(c.scope(), parts, axis));
  return Status::OK();
}

Status SliceShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(auto begin, c.GetAttr<std::vector<int64_t>>("begin"));
  ASSIGN_OR_RETURN(auto size, c.GetAttr<std::vector<int64_t>>("size"));
  const Shape& x = c.input_shape(0);
  if (x.unknown_rank()) return c.Error("input must have known rank");
  if (static_cast<int>(begin.size()) != x.rank() || static_cast<int>(size.size()) != x.rank()) {
    return c.Error("begin and size need {} entries each", x.rank());
  }
  std::vector<int64_t> dims;
  for (int d = 0; d < x.rank(); ++d) {
    if (begin[d] < 0 || size[d] < -1)
      return c.Error("bad begin {} or size {} in dimension {}", begin[d], size[d], d);
    int64_t end = size[d] < 0 ? x[d] : begin[d] + size[d];
    if (x[d] >= 0 && (begin[d] > x[d] || end > x[d])) {
      return c.Error("slice [{}, {}) of dimension {} is outside its size {}", begin[d], end, d,
                     x[d]);
    }
    dims.push_back(size[d] >= 0 ? size[d] : (x[d] < 0 ? -1 : x[d] - begin[d]));
  }
  c.set_output(0, Shape(dims));
  return Status::OK();
}

Status SliceGrad(GradContext& c) {
  ASSIGN_OR_RETURN(auto begin, c.node().GetAttr<std::vector<int64_t>>("begin"));
  const Shape& x = c.input(0).shape();
  const Shape& y = c.output(0).shape();
  if (!x.fully_defined() || !y.fully_defined()) {
    return InvalidArgument("node '{}': Slice's gradient needs known input and output shapes",
                           c.node().name());
  }
  std::vector<int64_t> pads;
  for (int d = 0; d < x.rank(); ++d) {
    pads.push_back(begin[d]);
    pads.push_back(x[d] - begin[d] - y[d]);
  }
  c.set_input_grad(0, Pad(c.scope(), c.grad(0), pads));
  return Status::OK();
}

Status PadShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(auto pads, c.GetAttr<std::vector<int64_t>>("paddings"));
  const Shape& x = c.input_shape(0);
  if (x.unknown_rank()) return c.Error("input must have known rank");
  if (static_cast<int>(pads.size()) != 2 * x.rank()) {
    return c.Error("paddings needs {} entries (before and after each dimension), got {}",
                   2 * x.rank(), pads.size());
  }
  std::vector<int64_t> dims;
  for (int d = 0; d < x.rank(); ++d) {
    if (pads[2 * d] < 0 || pads[2 * d + 1] < 0) return c.Error("paddings must be >= 0");
    dims.push_back(x[d] < 0 ? -1 : x[d] + pads[2 * d] + pads[2 * d + 1]);
  }
  c.set_output(0, Shape(dims));
  return Status::OK();
}

Status PadGrad(GradContext& c) {
  ASSIGN_OR_RETURN(auto pads, c.node().GetAttr<std::vector<int64_t>>("paddings"));
  const Shape& x = c.input(0).shape();
  std::vector<int64_t> begin, size;
  for (int d = 0; d < x.rank(); ++d) {
    begin.push_back(pads[2 * d]);
    size.push_back(x[d]);  // -1 (to the end) would include the trailing padding
    if (x[d] < 0) {
      return InvalidArgument("node '{}': Pad's gradient needs the input's shape", c.node().name());
    }
  }
  c.set_input_grad(0, Slice(c.scope(), c.grad(0), begin, size));
  return Status::OK();
}

Status OneHotShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(int64_t depth, c.GetAttr<int64_t>("depth"));
  if (depth < 0) return c.Error("depth is {} (must be >= 0)", depth);
  const Shape& i = c.input_shape(0);
  if (!i.unknown_rank() && i.rank() != 1) return c.Error("indices must be a vector, got {}", i);
  c.set_output(0, Shape{i.unknown_rank() ? -1 : i[0], depth});
  return Status::OK();
}

Status PassThrough(GradContext& c) {
  c.set_input_grad(0, c.grad(0));
  return Status::OK();
}

}  // namespace

Status RegisterManipOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register(
      {.name = "Transpose",
       .inputs = {{.name = "x", .type_attr = "T", .allowed = kCastTypes}},
       .outputs = {{.name = "y", .type_attr = "T"}},
       .attrs = {{"T", AttrType::kDType, std::nullopt}, {"perm", AttrType::kIntList, std::nullopt}},
       .shape_fn = TransposeShape,
       .cost_fn = ElementwiseCostFn(0),
       .grad_fn = TransposeGrad}));
  RETURN_IF_ERROR(r.Register(
      {.name = "Concat",
       .inputs = {{.name = "xs", .type_attr = "T", .allowed = kCastTypes, .variadic = true}},
       .outputs = {{.name = "y", .type_attr = "T"}},
       .attrs = {{"T", AttrType::kDType, std::nullopt}, {"axis", AttrType::kInt, std::nullopt}},
       .shape_fn = ConcatShape,
       .cost_fn = ElementwiseCostFn(0),
       .grad_fn = ConcatGrad}));
  RETURN_IF_ERROR(r.Register(
      {.name = "WriteRows",
       .inputs = {{.name = "x", .type_attr = "T", .allowed = kCastTypes},
                  {.name = "y", .type_attr = "T", .allowed = kCastTypes}},
       .outputs = {{.name = "z", .type_attr = "T"}},
       .attrs = {{"T", AttrType::kDType, std::nullopt}, {"offset", AttrType::kInt, std::nullopt}},
       .shape_fn = WriteRowsShape,
       .cost_fn = ElementwiseCostFn(0)}));
  // The all-reduce's assembly (ops/all_reduce.cc): z is x with rows [offset, offset + rows of
  // ys) set to scale * (the sum of the ys), and `rows` a view of those rows of z. It writes into
  // x's buffer even while others hold views of it, which only a chain that starts from an Empty
  // of its own and whose views read rows it has finished may do: not for graphs users build.
  RETURN_IF_ERROR(r.Register(
      {.name = "_WriteRowsSum",
       .inputs = {{.name = "x", .type_attr = "T", .allowed = kNumericTypes},
                  {.name = "ys", .type_attr = "T", .allowed = kNumericTypes, .variadic = true}},
       .outputs = {{.name = "z", .type_attr = "T"}, {.name = "rows", .type_attr = "T"}},
       .attrs = {{"T", AttrType::kDType, std::nullopt},
                 {"offset", AttrType::kInt, std::nullopt},
                 {"scale", AttrType::kFloat, 1.0}},
       .shape_fn = WriteRowsSumShape,
       .cost_fn = ElementwiseCostFn(0)}));
  RETURN_IF_ERROR(
      r.Register({.name = "Split",
                  .inputs = {{.name = "x", .type_attr = "T", .allowed = kCastTypes}},
                  .outputs = {{.name = "ys", .type_attr = "T", .number_attr = "num_split"}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt},
                            {"axis", AttrType::kInt, std::nullopt},
                            {"num_split", AttrType::kInt, std::nullopt},
                            {"sizes", AttrType::kIntList, std::vector<int64_t>{}}},
                  .shape_fn = SplitShape,
                  .cost_fn = ElementwiseCostFn(0),
                  .grad_fn = SplitGrad}));
  RETURN_IF_ERROR(r.Register({.name = "Slice",
                              .inputs = {{.name = "x", .type_attr = "T", .allowed = kCastTypes}},
                              .outputs = {{.name = "y", .type_attr = "T"}},
                              .attrs = {{"T", AttrType::kDType, std::nullopt},
                                        {"begin", AttrType::kIntList, std::nullopt},
                                        {"size", AttrType::kIntList, std::nullopt}},
                              .shape_fn = SliceShape,
                              .cost_fn = ElementwiseCostFn(0),
                              .grad_fn = SliceGrad}));
  RETURN_IF_ERROR(r.Register({.name = "Pad",
                              .inputs = {{.name = "x", .type_attr = "T", .allowed = kCastTypes}},
                              .outputs = {{.name = "y", .type_attr = "T"}},
                              .attrs = {{"T", AttrType::kDType, std::nullopt},
                                        {"paddings", AttrType::kIntList, std::nullopt},
                                        {"value", AttrType::kFloat, 0.0}},
                              .shape_fn = PadShape,
                              .cost_fn = ElementwiseCostFn(0),
                              .grad_fn = PadGrad}));
  RETURN_IF_ERROR(r.Register(
      {.name = "OneHot",
       .inputs = {{.name = "indices", .type_attr = "TI", .allowed = {DType::kI32, DType::kI64}}},
       .outputs = {{.name = "y", .type_attr = "dtype", .allowed = kCastTypes}},
       .attrs = {{"TI", AttrType::kDType, std::nullopt},
                 {"depth", AttrType::kInt, std::nullopt},
                 {"dtype", AttrType::kDType, DType::kF32}},
       .shape_fn = OneHotShape,
       .cost_fn = ElementwiseCostFn(0)}));
  RETURN_IF_ERROR(r.Register({.name = "CheckNumerics",
                              .inputs = {{.name = "x", .type_attr = "T", .allowed = kFloatTypes}},
                              .outputs = {{.name = "y", .type_attr = "T"}},
                              .attrs = {{"T", AttrType::kDType, std::nullopt},
                                        {"message", AttrType::kString, std::string()}},
                              .shape_fn = SameShapeAsInput0,
                              .cost_fn = ElementwiseCostFn(1),
                              .grad_fn = PassThrough}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
