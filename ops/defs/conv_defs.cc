// The definitions (shape, cost, properties) and gradients of the convolution and pooling ops.
#include <limits>

#include "ops/conv_ops.h"
#include "ops/defs/grad_util.h"
#include "ops/defs/op_defs.h"

namespace dflow::ops::internal {
namespace {

// One spatial output size; -1 when the input size is unknown. Computed in 128 bits: attributes
// from a file can be anything, and a size that does not fit is an error, not an overflow.
Result<int64_t> OutSize(InferenceContext& c, int64_t in, int64_t k, int64_t stride, int64_t pad_lo,
                        int64_t pad_hi, int64_t dilation) {
  if (in < 0) return int64_t{-1};
  if (k < 0) return int64_t{-1};
  __int128 span = static_cast<__int128>(k - 1) * dilation + 1;
  __int128 padded = static_cast<__int128>(in) + pad_lo + pad_hi;
  __int128 out = padded < span ? 0 : (padded - span) / stride + 1;
  if (out > std::numeric_limits<int64_t>::max()) {
    return c.Error("the output size of a spatial dimension ({} padded by {} and {}) overflows", in,
                   pad_lo, pad_hi);
  }
  return static_cast<int64_t>(out);
}

Status CheckList(InferenceContext& c, const char* name, const std::vector<int64_t>& v, size_t size,
                 int64_t min) {
  if (v.size() != size)
    return c.Error("attribute '{}' needs {} values, got {}", name, size, v.size());
  for (int64_t x : v) {
    if (x < min) return c.Error("attribute '{}' has {} (must be >= {})", name, x, min);
  }
  return Status::OK();
}

struct ConvParams {
  std::vector<int64_t> strides, pads, dilations;
  int64_t groups;
};

Result<ConvParams> GetConvParams(InferenceContext& c) {
  ConvParams p;
  ASSIGN_OR_RETURN(p.strides, c.GetAttr<std::vector<int64_t>>("strides"));
  ASSIGN_OR_RETURN(p.pads, c.GetAttr<std::vector<int64_t>>("pads"));
  ASSIGN_OR_RETURN(p.dilations, c.GetAttr<std::vector<int64_t>>("dilations"));
  ASSIGN_OR_RETURN(p.groups, c.GetAttr<int64_t>("groups"));
  RETURN_IF_ERROR(CheckList(c, "strides", p.strides, 2, 1));
  RETURN_IF_ERROR(CheckList(c, "pads", p.pads, 4, 0));
  RETURN_IF_ERROR(CheckList(c, "dilations", p.dilations, 2, 1));
  if (p.groups < 1) return c.Error("groups is {} (must be >= 1)", p.groups);
  return p;
}

Status Conv2DShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(ConvParams p, GetConvParams(c));
  const Shape& x = c.input_shape(0);
  const Shape& w = c.input_shape(1);
  if (!x.unknown_rank() && x.rank() != 4) return c.Error("input must be NCHW (rank 4), got {}", x);
  if (!w.unknown_rank() && w.rank() != 4) return c.Error("filter must be OIHW (rank 4), got {}", w);
  if (x.unknown_rank() || w.unknown_rank()) {
    c.set_output(0, Shape{-1, -1, -1, -1});
    return Status::OK();
  }
  if (w[0] >= 0 && w[0] % p.groups != 0) {
    return c.Error("{} output channels do not split into {} groups", w[0], p.groups);
  }
  if (x[1] >= 0 && w[1] >= 0 && x[1] != w[1] * p.groups) {
    return c.Error("input has {} channels but the filter {} expects {} ({} groups)", x[1], w,
                   w[1] * p.groups, p.groups);
  }
  ASSIGN_OR_RETURN(int64_t h,
                   OutSize(c, x[2], w[2], p.strides[0], p.pads[0], p.pads[2], p.dilations[0]));
  ASSIGN_OR_RETURN(int64_t wd,
                   OutSize(c, x[3], w[3], p.strides[1], p.pads[1], p.pads[3], p.dilations[1]));
  c.set_output(0, Shape{x[0], w[0], h, wd});
  return Status::OK();
}

Status ShapeOfInput2(InferenceContext& c) {
  RETURN_IF_ERROR(GetConvParams(c).status());
  c.set_output(0, c.input_shape(2));
  return Status::OK();
}

OpCost ConvCost(const CostContext& c) {
  OpCost cost = ElementwiseCost(c, 0);
  const Shape& w = c.input_shapes[1];
  const Shape& y = c.output_shapes[0];
  if (w.fully_defined() && y.fully_defined()) {
    cost.flops = 2.0 * y.num_elements() * w[1] * w[2] * w[3];
  }
  return cost;
}

Status PoolShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(auto k, c.GetAttr<std::vector<int64_t>>("ksize"));
  ASSIGN_OR_RETURN(auto s, c.GetAttr<std::vector<int64_t>>("strides"));
  ASSIGN_OR_RETURN(auto pads, c.GetAttr<std::vector<int64_t>>("pads"));
  RETURN_IF_ERROR(CheckList(c, "ksize", k, 2, 1));
  RETURN_IF_ERROR(CheckList(c, "strides", s, 2, 1));
  RETURN_IF_ERROR(CheckList(c, "pads", pads, 4, 0));
  if (pads[0] >= k[0] || pads[2] >= k[0] || pads[1] >= k[1] || pads[3] >= k[1]) {
    return c.Error("padding must be smaller than the window");
  }
  const Shape& x = c.input_shape(0);
  if (x.unknown_rank()) {
    c.set_output(0, Shape{-1, -1, -1, -1});
    return Status::OK();
  }
  if (x.rank() != 4) return c.Error("input must be NCHW (rank 4), got {}", x);
  ASSIGN_OR_RETURN(int64_t h, OutSize(c, x[2], k[0], s[0], pads[0], pads[2], 1));
  ASSIGN_OR_RETURN(int64_t w, OutSize(c, x[3], k[1], s[1], pads[1], pads[3], 1));
  c.set_output(0, Shape{x[0], x[1], h, w});
  return Status::OK();
}

Conv2DAttrs ConvAttrsOf(const Node& n) {
  return {std::get<std::vector<int64_t>>(*n.FindAttr("strides")),
          std::get<std::vector<int64_t>>(*n.FindAttr("pads")),
          std::get<std::vector<int64_t>>(*n.FindAttr("dilations")),
          std::get<int64_t>(*n.FindAttr("groups"))};
}
PoolAttrs PoolAttrsOf(const Node& n) {
  return {std::get<std::vector<int64_t>>(*n.FindAttr("ksize")),
          std::get<std::vector<int64_t>>(*n.FindAttr("strides")),
          std::get<std::vector<int64_t>>(*n.FindAttr("pads"))};
}

Status Conv2DGrad(GradContext& c) {
  Conv2DAttrs a = ConvAttrsOf(c.node());
  if (c.wanted(0))
    c.set_input_grad(0, Conv2DBackpropInput(c.scope(), c.grad(0), c.input(1), c.input(0), a));
  if (c.wanted(1))
    c.set_input_grad(1, Conv2DBackpropFilter(c.scope(), c.input(0), c.grad(0), c.input(1), a));
  return Status::OK();
}
Status MaxPoolGradFn(GradContext& c) {
  c.set_input_grad(0, MaxPoolGrad(c.scope(), c.input(0), c.grad(0), PoolAttrsOf(c.node())));
  return Status::OK();
}
Status AvgPoolGradFn(GradContext& c) {
  c.set_input_grad(0, AvgPoolGrad(c.scope(), c.input(0), c.grad(0), PoolAttrsOf(c.node())));
  return Status::OK();
}

std::vector<AttrDef> ConvAttrDefs() {
  return {{"T", AttrType::kDType, std::nullopt},
          {"strides", AttrType::kIntList, std::vector<int64_t>{1, 1}},
          {"pads", AttrType::kIntList, std::vector<int64_t>{0, 0, 0, 0}},
          {"dilations", AttrType::kIntList, std::vector<int64_t>{1, 1}},
          {"groups", AttrType::kInt, int64_t{1}}};
}
std::vector<AttrDef> PoolAttrDefs() {
  return {{"T", AttrType::kDType, std::nullopt},
          {"ksize", AttrType::kIntList, std::vector<int64_t>{2, 2}},
          {"strides", AttrType::kIntList, std::vector<int64_t>{2, 2}},
          {"pads", AttrType::kIntList, std::vector<int64_t>{0, 0, 0, 0}}};
}
// The convolutions take f16 and bf16 too (GPU kernels); pooling the float types.
std::vector<ArgDef> Args(std::initializer_list<const char*> names,
                         const std::vector<DType>& types = kFloatTypes) {
  std::vector<ArgDef> args;
  for (const char* n : names) args.push_back({.name = n, .type_attr = "T", .allowed = types});
  return args;
}

}  // namespace

Status RegisterConvOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register({.name = "Conv2D",
                              .inputs = Args({"x", "w"}, kDenseTypes),
                              .outputs = Args({"y"}, kDenseTypes),
                              .attrs = ConvAttrDefs(),
                              .fusion = {.kind = OpFusion::Kind::kEpilogue,
                                         .fused_op = "_FusedConv2D",
                                         .bias = Epilogue::kChannelAdd},
                              .shape_fn = Conv2DShape,
                              .cost_fn = ConvCost,
                              .grad_fn = Conv2DGrad}));
  RETURN_IF_ERROR(r.Register({.name = "Conv2DBackpropInput",
                              .inputs = Args({"dy", "w", "x_like"}, kDenseTypes),
                              .outputs = Args({"dx"}, kDenseTypes),
                              .attrs = ConvAttrDefs(),
                              .shape_fn = ShapeOfInput2,
                              .cost_fn = ElementwiseCostFn(1)}));
  RETURN_IF_ERROR(r.Register({.name = "Conv2DBackpropFilter",
                              .inputs = Args({"x", "dy", "w_like"}, kDenseTypes),
                              .outputs = Args({"dw"}, kDenseTypes),
                              .attrs = ConvAttrDefs(),
                              .shape_fn = ShapeOfInput2,
                              .cost_fn = ElementwiseCostFn(1)}));
  RETURN_IF_ERROR(r.Register({.name = "MaxPool",
                              .inputs = Args({"x"}),
                              .outputs = Args({"y"}),
                              .attrs = PoolAttrDefs(),
                              .fusion = {.kind = OpFusion::Kind::kArgmax,
                                         .fused_op = "_MaxPoolWithArgmax",
                                         .fused_partner = "_MaxPoolGradWithArgmax"},
                              .shape_fn = PoolShape,
                              .cost_fn = ElementwiseCostFn(4),
                              .grad_fn = MaxPoolGradFn}));
  RETURN_IF_ERROR(r.Register({.name = "AvgPool",
                              .inputs = Args({"x"}),
                              .outputs = Args({"y"}),
                              .attrs = PoolAttrDefs(),
                              .shape_fn = PoolShape,
                              .cost_fn = ElementwiseCostFn(4),
                              .grad_fn = AvgPoolGradFn}));
  for (const char* name : {"MaxPoolGrad", "AvgPoolGrad"}) {
    RETURN_IF_ERROR(r.Register({.name = name,
                                .inputs = Args({"x", "dy"}),
                                .outputs = Args({"dx"}),
                                .attrs = PoolAttrDefs(),
                                // MaxPool's, for the rewrite that pairs them.
                                .gradient_of = std::string(name) == "MaxPoolGrad" ? "MaxPool" : "",
                                .shape_fn = SameShapeAsInput0,
                                .cost_fn = ElementwiseCostFn(4)}));
  }
  return Status::OK();
}

}  // namespace dflow::ops::internal
