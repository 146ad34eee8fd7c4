// The definitions (shape, cost, properties) and gradients of the batch normalization ops.
#include "ops/array_ops.h"
#include "ops/batch_norm_dims.h"
#include "ops/batch_norm_ops.h"
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"

namespace dflow::ops::internal {
namespace {

// Checks x [N, C, ...] and that the [C] inputs `first`.. agree with it; returns C (-1: unknown).
Result<int64_t> CheckChannels(InferenceContext& c, int first, int count) {
  const Shape& x = c.input_shape(0);
  if (!x.unknown_rank() && (x.rank() < 2 || x.rank() > 5)) {
    return c.Error("input must be [N, C, ...] of rank 2 to 5, got {}", x);
  }
  int64_t channels = x.unknown_rank() ? -1 : x[1];
  for (int i = first; i < first + count; ++i) {
    const Shape& s = c.input_shape(i);
    if (s.unknown_rank()) continue;
    if (s.rank() != 1) return c.Error("input {} must be a vector [C], got {}", i, s);
    if (channels >= 0 && s[0] >= 0 && s[0] != channels) {
      return c.Error("input {} has {} elements but x {} has {} channels", i, s[0], x, channels);
    }
    if (channels < 0) channels = s[0];
  }
  return channels;
}

Status BatchNormShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(int64_t channels, CheckChannels(c, 1, 2));
  c.set_output(0, c.input_shape(0));
  c.set_output(1, Shape{channels});
  c.set_output(2, Shape{channels});
  return Status::OK();
}

Status BatchNormInferenceShape(InferenceContext& c) {
  RETURN_IF_ERROR(CheckChannels(c, 1, 4).status());
  c.set_output(0, c.input_shape(0));
  return Status::OK();
}

Status BatchNormGradShape(InferenceContext& c) {
  // Inputs: dy, x, scale, mean, variance. Check x against the vectors, then dy against x.
  const Shape& dy = c.input_shape(0);
  const Shape& x = c.input_shape(1);
  if (!dy.unknown_rank() && !x.unknown_rank() && !dy.IsCompatibleWith(x)) {
    return c.Error("output gradient {} does not match the input {}", dy, x);
  }
  int64_t channels = x.unknown_rank() ? -1 : (x.rank() >= 2 ? x[1] : -1);
  c.set_output(0, x);
  c.set_output(1, Shape{channels});
  c.set_output(2, Shape{channels});
  return Status::OK();
}

BatchNormAttrs AttrsOf(const Node& n) { return {std::get<double>(*n.FindAttr("epsilon"))}; }

Status BatchNormGradFn(GradContext& c) {
  if (c.grad(1).valid() || c.grad(2).valid()) {
    return InvalidArgument(
        "node '{}' (BatchNorm): no gradient through the batch mean or variance outputs; "
        "differentiate y only",
        c.node().name());
  }
  auto g = BatchNormGrad(c.scope(), c.grad(0), c.input(0), c.input(1), c.output(1), c.output(2),
                         AttrsOf(c.node()));
  c.set_input_grad(0, g.dx);
  c.set_input_grad(1, g.dscale);
  c.set_input_grad(2, g.doffset);
  return Status::OK();
}

// v [C] reshaped to [C, 1, ...] so it broadcasts over a rank-`rank` [N, C, ...] tensor.
Output PerChannel(const Scope& s, Output v, int rank) {
  std::vector<int64_t> dims(rank - 1, 1);
  dims[0] = -1;
  return Reshape(s, v, dims);
}

// y = (x - mean) * k + offset with k = scale / sqrt(variance + epsilon).
Status BatchNormInferenceGradFn(GradContext& c) {
  const Scope& s = c.scope();
  Output x = c.input(0), scale = c.input(1), mean = c.input(3), var = c.input(4), dy = c.grad(0);
  if (x.shape().unknown_rank()) {
    return InvalidArgument("node '{}' (BatchNormInference): the gradient needs the rank of x",
                           c.node().name());
  }
  int rank = x.shape().rank();
  std::vector<int64_t> axes = NonChannelAxes(rank);
  double eps = AttrsOf(c.node()).epsilon;
  Output inv = Rsqrt(s, Add(s, var, ScalarLike(c, var, eps)));
  Output k = Mul(s, scale, inv);
  Output doffset = ReduceSum(s, dy, axes);
  Output dy_xc = ReduceSum(s, Mul(s, dy, Sub(s, x, PerChannel(s, mean, rank))), axes);
  if (c.wanted(0)) c.set_input_grad(0, Mul(s, dy, PerChannel(s, k, rank)));
  if (c.wanted(1)) c.set_input_grad(1, Mul(s, dy_xc, inv));
  if (c.wanted(2)) c.set_input_grad(2, doffset);
  if (c.wanted(3)) c.set_input_grad(3, Neg(s, Mul(s, doffset, k)));
  if (c.wanted(4)) {  // d/dvar of (var + eps)^-1/2 = -1/2 inv^3
    Output inv3 = Mul(s, inv, Square(s, inv));
    c.set_input_grad(4, Mul(s, Mul(s, dy_xc, scale), Mul(s, inv3, ScalarLike(c, var, -0.5))));
  }
  return Status::OK();
}

ArgDef Arg(const char* name) { return {.name = name, .type_attr = "T", .allowed = kFloatTypes}; }

std::vector<AttrDef> BatchNormAttrDefs() {
  return {{"T", AttrType::kDType, std::nullopt}, {"epsilon", AttrType::kFloat, 1e-5}};
}

}  // namespace

Status RegisterBatchNormOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register({.name = "BatchNorm",
                              .inputs = {Arg("x"), Arg("scale"), Arg("offset")},
                              .outputs = {Arg("y"), Arg("mean"), Arg("variance")},
                              .attrs = BatchNormAttrDefs(),
                              .shape_fn = BatchNormShape,
                              .cost_fn = ElementwiseCostFn(8),
                              .grad_fn = BatchNormGradFn}));
  RETURN_IF_ERROR(
      r.Register({.name = "BatchNormInference",
                  .inputs = {Arg("x"), Arg("scale"), Arg("offset"), Arg("mean"), Arg("variance")},
                  .outputs = {Arg("y")},
                  .attrs = BatchNormAttrDefs(),
                  .shape_fn = BatchNormInferenceShape,
                  .cost_fn = ElementwiseCostFn(2),
                  .grad_fn = BatchNormInferenceGradFn}));
  RETURN_IF_ERROR(
      r.Register({.name = "BatchNormGrad",
                  .inputs = {Arg("dy"), Arg("x"), Arg("scale"), Arg("mean"), Arg("variance")},
                  .outputs = {Arg("dx"), Arg("dscale"), Arg("doffset")},
                  .attrs = BatchNormAttrDefs(),
                  .shape_fn = BatchNormGradShape,
                  .cost_fn = ElementwiseCostFn(8)}));
  return Status::OK();
}

}  // namespace dflow::ops::internal
