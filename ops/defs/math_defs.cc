// The definitions (shape, cost, properties) and gradients of the arithmetic ops: element-wise
// binary ops, matrix products, reductions.
#include <algorithm>

#include "ops/array_ops.h"
#include "ops/broadcast.h"
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"
#include "ops/logic_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"

namespace dflow::ops::internal {

Status BroadcastShapeFn(InferenceContext& c) {
  auto s = BroadcastShape(c.input_shape(0), c.input_shape(1));
  if (!s.ok()) return c.Error("{}", s.status().message());
  c.set_output(0, *s);
  return Status::OK();
}

Status SameShapeAsInput0(InferenceContext& c) {
  c.set_output(0, c.input_shape(0));
  return Status::OK();
}

namespace {

// Gradients of the binary ops, undoing broadcasting on each side.
Status AddGrad(GradContext& c) {
  c.set_input_grad(0, Unbroadcast(c, c.grad(0), 0));
  c.set_input_grad(1, Unbroadcast(c, c.grad(0), 1));
  return Status::OK();
}
Status SubGrad(GradContext& c) {
  c.set_input_grad(0, Unbroadcast(c, c.grad(0), 0));
  if (c.wanted(1)) c.set_input_grad(1, Unbroadcast(c, Neg(c.scope(), c.grad(0)), 1));
  return Status::OK();
}
Status MulGrad(GradContext& c) {
  const Scope& s = c.scope();
  if (c.wanted(0)) c.set_input_grad(0, Unbroadcast(c, Mul(s, c.grad(0), c.input(1)), 0));
  if (c.wanted(1)) c.set_input_grad(1, Unbroadcast(c, Mul(s, c.grad(0), c.input(0)), 1));
  return Status::OK();
}
Status DivGrad(GradContext& c) {  // d(a/b) = g/b, -g a / b^2
  const Scope& s = c.scope();
  Output a = c.input(0), b = c.input(1), g = c.grad(0);
  if (c.wanted(0)) c.set_input_grad(0, Unbroadcast(c, Div(s, g, b), 0));
  if (c.wanted(1)) {
    c.set_input_grad(1, Unbroadcast(c, Neg(s, Div(s, Mul(s, g, a), Square(s, b))), 1));
  }
  return Status::OK();
}
// Maximum and Minimum: the gradient goes to the input that was chosen (a on ties).
Status SelectGradOf(GradContext& c, Output take_a) {
  const Scope& s = c.scope();
  Output g = c.grad(0), zeros = ZerosLike(s, g);
  if (c.wanted(0)) c.set_input_grad(0, Unbroadcast(c, Select(s, take_a, g, zeros), 0));
  if (c.wanted(1)) c.set_input_grad(1, Unbroadcast(c, Select(s, take_a, zeros, g), 1));
  return Status::OK();
}
Status MaximumGrad(GradContext& c) {
  return SelectGradOf(c, GreaterEqual(c.scope(), c.input(0), c.input(1)));
}
Status MinimumGrad(GradContext& c) {
  return SelectGradOf(c, LessEqual(c.scope(), c.input(0), c.input(1)));
}
Status PowGrad(GradContext& c) {  // d a^b = g b a^(b-1);  g a^b log a (taken as 0 where a <= 0)
  const Scope& s = c.scope();
  Output a = c.input(0), b = c.input(1), g = c.grad(0);
  if (c.wanted(0)) {
    Output da = Mul(s, b, Pow(s, a, Sub(s, b, ScalarLike(c, b, 1))));
    c.set_input_grad(0, Unbroadcast(c, Mul(s, g, da), 0));
  }
  if (c.wanted(1)) {
    Output zero = ZerosLike(s, a);
    Output log_a = Select(s, Greater(s, a, zero), Log(s, a), zero);
    c.set_input_grad(1, Unbroadcast(c, Mul(s, g, Mul(s, c.output(0), log_a)), 1));
  }
  return Status::OK();
}
// Reads relu's output (y > 0 exactly where x > 0), not its input: then only the Relu reads the
// input, which lets epilogue fusion fold the Relu into the op producing it.
Status ReluGradFn(GradContext& c) {
  c.set_input_grad(0, ReluGrad(c.scope(), c.grad(0), c.output(0)));
  return Status::OK();
}
template <Output (*kMatMul)(const Scope&, Output, Output, const MatMulAttrs&)>
Status MatMulGrad(GradContext& c) {
  ASSIGN_OR_RETURN(bool ta, c.node().GetAttr<bool>("transpose_a"));
  ASSIGN_OR_RETURN(bool tb, c.node().GetAttr<bool>("transpose_b"));
  const Scope& s = c.scope();
  Output a = c.input(0), b = c.input(1), g = c.grad(0);
  Output ga, gb;
  if (!ta && !tb) {  // C = A B
    ga = kMatMul(s, g, b, {.transpose_b = true});
    gb = kMatMul(s, a, g, {.transpose_a = true});
  } else if (!ta && tb) {  // C = A B^T
    ga = kMatMul(s, g, b, {});
    gb = kMatMul(s, g, a, {.transpose_a = true});
  } else if (ta && !tb) {  // C = A^T B
    ga = kMatMul(s, b, g, {.transpose_b = true});
    gb = kMatMul(s, a, g, {});
  } else {  // C = A^T B^T
    ga = kMatMul(s, b, g, {.transpose_a = true, .transpose_b = true});
    gb = kMatMul(s, g, a, {.transpose_a = true, .transpose_b = true});
  }
  c.set_input_grad(0, ga);
  c.set_input_grad(1, gb);
  return Status::OK();
}
Status BiasAddGrad(GradContext& c) {
  c.set_input_grad(0, c.grad(0));
  if (c.wanted(1)) c.set_input_grad(1, SumToShapeOf(c.scope(), c.grad(0), c.input(1)));
  return Status::OK();
}
// The gradient goes to the elements equal to the maximum, shared equally among ties.
Status ReduceMaxGrad(GradContext& c) {
  ASSIGN_OR_RETURN(auto axes, c.node().GetAttr<std::vector<int64_t>>("axes"));
  ASSIGN_OR_RETURN(bool keep, c.node().GetAttr<bool>("keep_dims"));
  const Scope& s = c.scope();
  Output x = c.input(0);
  Output mask = Cast(s, Equal(s, x, ReduceGrad(s, c.output(0), x, axes, keep, false)), x.dtype());
  Output count = ReduceSum(s, mask, axes, {.keep_dims = keep});
  Output share = Div(s, c.grad(0), count);
  c.set_input_grad(0, Mul(s, mask, ReduceGrad(s, share, x, axes, keep, false)));
  return Status::OK();
}

// d prod / d x_i is the product of the group's other elements, found without dividing by a zero:
// with no zero in the group, prod / x_i; with one, the product of the rest at that zero and 0
// elsewhere; with more, 0 everywhere.
Status ReduceProdGrad(GradContext& c) {
  ASSIGN_OR_RETURN(auto axes, c.node().GetAttr<std::vector<int64_t>>("axes"));
  ASSIGN_OR_RETURN(bool keep, c.node().GetAttr<bool>("keep_dims"));
  const Scope& s = c.scope();
  Output x = c.input(0);
  const Output zero = ScalarConst(s, x.dtype(), 0), one = ScalarConst(s, x.dtype(), 1);
  auto back = [&](Output v) { return ReduceGrad(s, v, x, axes, keep, false); };
  const Output is_zero = Equal(s, x, zero);
  const Output nonzero = Select(s, is_zero, one, x);
  const Output zeros = back(ReduceSum(s, Cast(s, is_zero, x.dtype()), axes, {.keep_dims = keep}));
  const Output rest = back(ReduceProd(s, nonzero, axes, {.keep_dims = keep}));
  const Output others =
      Select(s, Equal(s, zeros, zero), Div(s, rest, nonzero),
             Select(s, Equal(s, zeros, one), Select(s, is_zero, rest, zero), zero));
  c.set_input_grad(0, Mul(s, back(c.grad(0)), others));
  return Status::OK();
}

Status ArgMaxShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(int64_t axis, c.GetAttr<int64_t>("axis"));
  const Shape& x = c.input_shape(0);
  if (x.unknown_rank()) {
    c.set_output(0, Shape::Unknown());
    return Status::OK();
  }
  if (axis < -x.rank() || axis >= x.rank()) {
    return c.Error("axis {} is out of range for input of rank {}", axis, x.rank());
  }
  if (axis < 0) axis += x.rank();
  std::vector<int64_t> dims;
  for (int d = 0; d < x.rank(); ++d) {
    if (d != axis) dims.push_back(x[d]);
  }
  c.set_output(0, Shape(dims));
  return Status::OK();
}

template <bool kMean>
Status ReduceGradFn(GradContext& c) {
  ASSIGN_OR_RETURN(auto axes, c.node().GetAttr<std::vector<int64_t>>("axes"));
  ASSIGN_OR_RETURN(bool keep, c.node().GetAttr<bool>("keep_dims"));
  c.set_input_grad(0, ReduceGrad(c.scope(), c.grad(0), c.input(0), axes, keep, kMean));
  return Status::OK();
}

// Dimension of `s` after an optional transpose of a matrix.
int64_t MatDim(const Shape& s, int i, bool transpose) { return s[transpose ? 1 - i : i]; }

Status MatMulShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(bool ta, c.GetAttr<bool>("transpose_a"));
  ASSIGN_OR_RETURN(bool tb, c.GetAttr<bool>("transpose_b"));
  const Shape& a = c.input_shape(0);
  const Shape& b = c.input_shape(1);
  for (int i = 0; i < 2; ++i) {
    const Shape& s = i == 0 ? a : b;
    if (!s.unknown_rank() && s.rank() != 2) {
      return c.Error("input {} must be a matrix (rank 2), got shape {}", i, s);
    }
  }
  if (a.unknown_rank() || b.unknown_rank()) {
    c.set_output(0, Shape{a.unknown_rank() ? -1 : MatDim(a, 0, ta),
                          b.unknown_rank() ? -1 : MatDim(b, 1, tb)});
    return Status::OK();
  }
  int64_t ka = MatDim(a, 1, ta), kb = MatDim(b, 0, tb);
  if (ka >= 0 && kb >= 0 && ka != kb) {
    return c.Error("inner dimensions differ: {}{} x {}{} ({} vs {})", a, ta ? "^T" : "", b,
                   tb ? "^T" : "", ka, kb);
  }
  c.set_output(0, Shape{MatDim(a, 0, ta), MatDim(b, 1, tb)});
  return Status::OK();
}

// [..., M, K] x [..., K, N] -> [..., M, N], leading dimensions equal.
Status BatchMatMulShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(bool ta, c.GetAttr<bool>("transpose_a"));
  ASSIGN_OR_RETURN(bool tb, c.GetAttr<bool>("transpose_b"));
  const Shape& a = c.input_shape(0);
  const Shape& b = c.input_shape(1);
  if (a.unknown_rank() || b.unknown_rank()) {
    c.set_output(0, Shape::Unknown());
    return Status::OK();
  }
  int r = a.rank();
  if (r < 3 || b.rank() != r) {
    return c.Error("inputs must be batches of matrices of one rank (>= 3), got {} and {}", a, b);
  }
  std::vector<int64_t> dims;
  for (int d = 0; d < r - 2; ++d) {
    if (a[d] >= 0 && b[d] >= 0 && a[d] != b[d]) {
      return c.Error("batch dimension {} differs: {} vs {}", d, a, b);
    }
    dims.push_back(a[d] >= 0 ? a[d] : b[d]);
  }
  int64_t ka = a[r - (ta ? 2 : 1)], kb = b[r - (tb ? 1 : 2)];
  if (ka >= 0 && kb >= 0 && ka != kb) {
    return c.Error("inner dimensions differ: {}{} x {}{} ({} vs {})", a, ta ? "^T" : "", b,
                   tb ? "^T" : "", ka, kb);
  }
  dims.push_back(a[r - (ta ? 1 : 2)]);
  dims.push_back(b[r - (tb ? 2 : 1)]);
  c.set_output(0, Shape(dims));
  return Status::OK();
}

// 2 M N K per output matrix, for MatMul and BatchMatMul alike.
OpCost MatMulCost(const CostContext& c) {
  OpCost cost = ElementwiseCost(c, 0);
  const Shape& a = c.input_shapes[0];
  const Shape& out = c.output_shapes[0];
  if (a.fully_defined() && out.fully_defined()) {
    bool ta = std::get<bool>(*c.node.FindAttr("transpose_a"));
    int64_t k = a[a.rank() - (ta ? 2 : 1)];
    cost.flops = 2.0 * out.num_elements() * k;
  }
  return cost;
}

Status BiasAddShape(InferenceContext& c) {
  const Shape& x = c.input_shape(0);
  const Shape& b = c.input_shape(1);
  if (!b.unknown_rank() && b.rank() != 1) return c.Error("bias must be a vector, got shape {}", b);
  if (!x.unknown_rank()) {
    if (x.rank() < 1) return c.Error("input must have rank >= 1, got a scalar");
    int64_t channels = x[x.rank() - 1];
    if (!b.unknown_rank() && channels >= 0 && b[0] >= 0 && channels != b[0]) {
      return c.Error("bias has {} elements but the input's last dimension is {} (shape {})", b[0],
                     channels, x);
    }
  }
  c.set_output(0, x);
  return Status::OK();
}

Status ReduceShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(auto axes, c.GetAttr<std::vector<int64_t>>("axes"));
  ASSIGN_OR_RETURN(bool keep, c.GetAttr<bool>("keep_dims"));
  const Shape& x = c.input_shape(0);
  if (x.unknown_rank()) {
    c.set_output(0, Shape::Unknown());
    return Status::OK();
  }
  std::vector<bool> reduced(x.rank(), axes.empty());
  for (int64_t a : axes) {
    if (a < -x.rank() || a >= x.rank()) {
      return c.Error("axis {} is out of range for input of rank {} (shape {})", a, x.rank(), x);
    }
    int64_t k = a < 0 ? a + x.rank() : a;
    if (reduced[k] && !axes.empty()) return c.Error("axis {} is given twice", a);
    reduced[k] = true;
  }
  std::vector<int64_t> dims;
  for (int i = 0; i < x.rank(); ++i) {
    if (!reduced[i]) {
      dims.push_back(x[i]);
    } else if (keep) {
      dims.push_back(1);
    }
  }
  c.set_output(0, Shape(dims));
  return Status::OK();
}

OpDef Binary(const std::string& name, GradFn grad, const std::vector<DType>& types = kNumericTypes,
             double flops = 1, bool commutative = false) {
  return {.name = name,
          .inputs = {{.name = "a", .type_attr = "T", .allowed = types},
                     {.name = "b", .type_attr = "T", .allowed = types}},
          .outputs = {{.name = "output", .type_attr = "T"}},
          .attrs = {{"T", AttrType::kDType, std::nullopt}},
          .elementwise = true,
          .commutative = commutative,
          .shape_fn = BroadcastShapeFn,
          .cost_fn = ElementwiseCostFn(flops),
          .grad_fn = std::move(grad)};
}

OpDef MatMulDef(const std::string& name, ShapeFn shape, GradFn grad) {
  return {.name = name,
          .inputs = {{.name = "a", .type_attr = "T", .allowed = kDenseTypes},
                     {.name = "b", .type_attr = "T", .allowed = kDenseTypes}},
          .outputs = {{.name = "product", .type_attr = "T"}},
          .attrs = {{"T", AttrType::kDType, std::nullopt},
                    {"transpose_a", AttrType::kBool, false},
                    {"transpose_b", AttrType::kBool, false}},
          .shape_fn = std::move(shape),
          .cost_fn = MatMulCost,
          .grad_fn = std::move(grad)};
}

Status CumSumShape(InferenceContext& c) {
  const Shape& axis = c.input_shape(1);
  if (!axis.unknown_rank() && axis.num_elements() > 1) {
    return c.Error("axis must be a scalar, got {}", axis);
  }
  c.set_output(0, c.input_shape(0));
  return Status::OK();
}

// The running sums' gradient runs the other way: the sum of the gradients of every later one.
Status CumSumGrad(GradContext& c) {
  ASSIGN_OR_RETURN(int64_t exclusive, c.node().GetAttr<int64_t>("exclusive"));
  ASSIGN_OR_RETURN(int64_t reverse, c.node().GetAttr<int64_t>("reverse"));
  c.set_input_grad(0, CumSum(c.scope(), c.grad(0), c.input(1), exclusive != 0, reverse == 0));
  return Status::OK();
}

OpDef Reduce(const std::string& name, GradFn grad) {
  return {.name = name,
          .inputs = {{.name = "input", .type_attr = "T", .allowed = kNumericTypes}},
          .outputs = {{.name = "output", .type_attr = "T"}},
          .attrs = {{"T", AttrType::kDType, std::nullopt},
                    {"axes", AttrType::kIntList, std::vector<int64_t>{}},
                    {"keep_dims", AttrType::kBool, false}},
          .shape_fn = ReduceShape,
          .cost_fn =
              [](const CostContext& c) {
                OpCost cost = ElementwiseCost(c, 0);
                cost.flops = std::max<int64_t>(c.input_shapes[0].num_elements(), 0);
                return cost;
              },
          .grad_fn = std::move(grad)};
}

}  // namespace

Status RegisterMathOps(OpRegistry& r) {
  OpDef add = Binary("Add", AddGrad, kNumericTypes, 1, /*commutative=*/true);
  add.epilogue = Epilogue::kChannelAdd;  // a convolution's bias, [C,1,1]
  add.fusion = {.kind = OpFusion::Kind::kAccumulate, .fused_op = "_MatMulAdd"};
  RETURN_IF_ERROR(r.Register(std::move(add)));
  RETURN_IF_ERROR(r.Register(Binary("Sub", SubGrad)));
  RETURN_IF_ERROR(r.Register(Binary("Mul", MulGrad, kNumericTypes, 1, /*commutative=*/true)));
  RETURN_IF_ERROR(r.Register(Binary("Div", DivGrad)));
  RETURN_IF_ERROR(r.Register(Binary("Maximum", MaximumGrad, kNumericTypes, 1, true)));
  RETURN_IF_ERROR(r.Register(Binary("Minimum", MinimumGrad, kNumericTypes, 1, true)));
  RETURN_IF_ERROR(r.Register(Binary("Pow", PowGrad, kFloatTypes, 20)));
  RETURN_IF_ERROR(r.Register({.name = "Relu",
                              .inputs = {{.name = "x", .type_attr = "T", .allowed = kNumericTypes}},
                              .outputs = {{.name = "y", .type_attr = "T"}},
                              .attrs = {{"T", AttrType::kDType, std::nullopt}},
                              .elementwise = true,
                              .epilogue = Epilogue::kRelu,
                              .shape_fn = SameShapeAsInput0,
                              .cost_fn = ElementwiseCostFn(1),
                              .grad_fn = ReluGradFn}));
  OpDef matmul = MatMulDef("MatMul", MatMulShape, MatMulGrad<MatMul>);
  matmul.fusion = {.kind = OpFusion::Kind::kEpilogue,
                   .fused_op = "_FusedMatMul",
                   .bias = Epilogue::kBiasAdd,
                   .absorbable = true};
  RETURN_IF_ERROR(r.Register(std::move(matmul)));
  RETURN_IF_ERROR(r.Register(MatMulDef("BatchMatMul", BatchMatMulShape, MatMulGrad<BatchMatMul>)));
  RETURN_IF_ERROR(
      r.Register({.name = "BiasAdd",
                  .inputs = {{.name = "input", .type_attr = "T", .allowed = kNumericTypes},
                             {.name = "bias", .type_attr = "T", .allowed = kNumericTypes}},
                  .outputs = {{.name = "output", .type_attr = "T"}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt}},
                  .epilogue = Epilogue::kBiasAdd,
                  .shape_fn = BiasAddShape,
                  .cost_fn = ElementwiseCostFn(1),
                  .grad_fn = BiasAddGrad}));
  RETURN_IF_ERROR(r.Register(Reduce("ReduceSum", ReduceGradFn<false>)));
  RETURN_IF_ERROR(r.Register(Reduce("ReduceMean", ReduceGradFn<true>)));
  RETURN_IF_ERROR(r.Register(Reduce("ReduceMax", ReduceMaxGrad)));
  RETURN_IF_ERROR(
      r.Register({.name = "CumSum",
                  .inputs = {{.name = "x", .type_attr = "T", .allowed = kNumericTypes},
                             {.name = "axis", .type_attr = "TA", .allowed = kIndexTypes}},
                  .outputs = {{.name = "y", .type_attr = "T"}},
                  .attrs = {{"T", AttrType::kDType, std::nullopt},
                            {"TA", AttrType::kDType, std::nullopt},
                            {"exclusive", AttrType::kInt, int64_t{0}},
                            {"reverse", AttrType::kInt, int64_t{0}}},
                  .shape_fn = CumSumShape,
                  .cost_fn = ElementwiseCostFn(1),
                  .grad_fn = CumSumGrad}));
  RETURN_IF_ERROR(r.Register(Reduce("ReduceProd", ReduceProdGrad)));
  RETURN_IF_ERROR(r.Register(
      {.name = "ArgMax",
       .inputs = {{.name = "x", .type_attr = "T", .allowed = kNumericTypes}},
       .outputs = {{.name = "index", .fixed = DType::kI64}},
       .attrs = {{"T", AttrType::kDType, std::nullopt}, {"axis", AttrType::kInt, std::nullopt}},
       .shape_fn = ArgMaxShape,
       .cost_fn = ElementwiseCostFn(1)}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
