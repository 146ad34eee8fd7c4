// The fused ops the fusion rewrite makes (rewrite/fusion.h): they exist only in compiled plans,
// never in a user's graph, and have no gradient.
#include "ops/attention_dims.h"
#include "ops/conv_geometry.h"
#include "ops/defs/op_defs.h"

namespace dflow::ops {
namespace internal {

Status RegisterLayoutOps(OpRegistry& r);

namespace {

// The fused op's shape function: the base op's on inputs 0 and 1, then a check that the bias
// (input 2) has one value per output channel: the last dimension for MatMul, dimension 1 for
// Conv2D. The activation after the bias: none, Relu, or (for MatMul) Gelu, the erf form.
ShapeFn FusedShape(ShapeFn base, int channel_axis) {
  return [base = std::move(base), channel_axis](InferenceContext& c) -> Status {
    RETURN_IF_ERROR(base(c));
    ASSIGN_OR_RETURN(std::string act, c.GetAttr<std::string>("activation"));
    if (act != "" && act != "Relu" && !(act == "Gelu" && channel_axis < 0)) {
      return c.Error("unknown activation '{}'", act);
    }
    const Shape& y = c.output_shapes[0];
    const Shape& bias = c.input_shape(2);
    int axis = channel_axis < 0 ? y.rank() + channel_axis : channel_axis;
    if (!y.unknown_rank() && bias.fully_defined() && y[axis] >= 0 &&
        bias.num_elements() != y[axis]) {
      return c.Error("bias {} does not have one value per output channel ({})", bias, y[axis]);
    }
    return Status::OK();
  };
}

OpDef FusedDef(const OpRegistry& r, const std::string& name, const std::string& base,
               int channel_axis) {
  const OpDef* b = r.Find(base);
  OpDef def = *b;
  def.name = name;
  // f32 on every device; f16 and bf16 on the GPU (cuBLASLt's and cuDNN's epilogues), whose
  // kernels the half-precision tests build directly. The fusion rewrite fuses only f32 nodes.
  const std::vector<DType> types = {DType::kF32, DType::kF16, DType::kBF16};
  def.inputs.push_back({.name = "bias", .type_attr = "T", .allowed = types});
  for (auto& in : def.inputs) in.allowed = types;
  def.attrs.push_back({"activation", AttrType::kString, std::string()});
  def.shape_fn = FusedShape(b->shape_fn, channel_axis);
  def.grad_fn = nullptr;  // fused nodes exist only in compiled plans
  def.fusion = {};        // and are not fused again
  return def;
}

// [N, C, H, W] as [N, ceil(C / block), H, W, block] (unknown dimensions stay unknown).
Shape Blocked(const Shape& s, int64_t block) {
  return Shape{s[0], s[1] < 0 ? -1 : (s[1] + block - 1) / block, s[2], s[3], block};
}

Result<int64_t> BlockAttr(InferenceContext& c) {
  ASSIGN_OR_RETURN(int64_t block, c.GetAttr<int64_t>("block"));
  if (block != 8 && block != 16) return c.Error("block {} (8 or 16)", block);
  return block;
}

// _BlockedConv2D: Conv2D's output shape, blocked.
Status BlockedConvShape(InferenceContext& c) {
  ASSIGN_OR_RETURN(int64_t block, BlockAttr(c));
  ASSIGN_OR_RETURN(bool x_blocked, c.GetAttr<bool>("x_blocked"));
  ASSIGN_OR_RETURN(std::string act, c.GetAttr<std::string>("activation"));
  if (act != "" && act != "Relu" && act != "Clip") return c.Error("unknown activation '{}'", act);
  const Shape& x = c.input_shape(0);
  const Shape& w = c.input_shape(1);
  if (c.num_inputs() > 4) return c.Error("takes a bias and at most one residual");
  if (w.unknown_rank() || w.rank() != 4 || !w.fully_defined()) {
    return c.Error("needs a filter of known shape [O, C / groups, KH, KW], got {}", w);
  }
  if (x.unknown_rank() || x.rank() != (x_blocked ? 5 : 4) || (x_blocked && x[4] != block)) {
    return c.Error("input {} is not {}", x,
                   x_blocked ? "blocked [N, C/b, H, W, b]" : "[N, C, H, W]");
  }
  ASSIGN_OR_RETURN(int64_t groups, c.GetAttr<int64_t>("groups"));
  const Shape plain{x[0], w[1] * groups, x[2], x[3]};
  if (x[2] < 0 || x[3] < 0) {
    c.set_output(0, Blocked(Shape{x[0], w[0], -1, -1}, block));
    return Status::OK();
  }
  ASSIGN_OR_RETURN(auto strides, c.GetAttr<std::vector<int64_t>>("strides"));
  ASSIGN_OR_RETURN(auto pads, c.GetAttr<std::vector<int64_t>>("pads"));
  ASSIGN_OR_RETURN(auto dilations, c.GetAttr<std::vector<int64_t>>("dilations"));
  auto g = ConvGeometryOf({strides, pads, dilations, groups},
                          Shape{plain[0] < 0 ? 1 : plain[0], plain[1], plain[2], plain[3]}, w);
  if (!g.ok()) return c.Error("{}", g.status().message());
  const Shape y = Blocked(Shape{x[0], w[0], g->oh, g->ow}, block);
  if (c.input_shape(2).fully_defined() && c.input_shape(2).num_elements() != w[0]) {
    return c.Error("bias {} does not have one value per output channel ({})", c.input_shape(2),
                   w[0]);
  }
  if (c.num_inputs() == 4 && !c.input_shape(3).unknown_rank() && c.input_shape(3) != y) {
    return c.Error("residual {} is not the output's shape {}", c.input_shape(3), y);
  }
  c.set_output(0, y);
  return Status::OK();
}

}  // namespace

Status SgdShape(InferenceContext& c) {
  c.set_output(0, c.input_shape(0));
  return Status::OK();
}

Status RegisterFusedOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register(FusedDef(r, "_FusedMatMul", "MatMul", -1)));
  RETURN_IF_ERROR(r.Register(FusedDef(r, "_FusedConv2D", "Conv2D", 1)));
  // var -= learning_rate * (a x b): the weight gradient of a dense layer and its SGD update in
  // one oneDNN matmul that accumulates into the variable, so the gradient is never stored.
  auto f32 = [](const char* name) {
    return ArgDef{.name = name, .type_attr = "T", .allowed = {DType::kF32}};
  };
  RETURN_IF_ERROR(r.Register({.name = "_MatMulApplySGD",
                              .inputs = {f32("var"), f32("learning_rate"), f32("a"), f32("b")},
                              .outputs = {f32("updated")},
                              .attrs = {{"T", AttrType::kDType, std::nullopt},
                                        {"transpose_a", AttrType::kBool, false},
                                        {"transpose_b", AttrType::kBool, false}},
                              .stateful = true,
                              .shape_fn = SgdShape,
                              .cost_fn = [](const CostContext& c) {
                                OpCost cost = ElementwiseCost(c, 0);
                                const Shape& a = c.input_shapes[2];
                                const Shape& var = c.output_shapes[0];
                                if (a.fully_defined() && var.fully_defined() && var.rank() == 2) {
                                  cost.flops = 2.0 * a.num_elements() * var[1];
                                }
                                return cost;
                              }}));
  // addend + a x b: a MatMul whose only reader adds it to a tensor of its own shape (a
  // pipeline's running sum of micro-batch gradients), one oneDNN matmul whose sum post-op adds
  // the product into the addend's buffer when it may be overwritten.
  RETURN_IF_ERROR(r.Register(
      {.name = "_MatMulAdd",
       .inputs = {f32("addend"), f32("a"), f32("b")},
       .outputs = {f32("sum")},
       .attrs = {{"T", AttrType::kDType, std::nullopt},
                 {"transpose_a", AttrType::kBool, false},
                 {"transpose_b", AttrType::kBool, false}},
       .shape_fn = [](InferenceContext& c) -> Status {
         ASSIGN_OR_RETURN(bool ta, c.GetAttr<bool>("transpose_a"));
         ASSIGN_OR_RETURN(bool tb, c.GetAttr<bool>("transpose_b"));
         const Shape& sum = c.input_shape(0);
         const Shape& a = c.input_shape(1);
         const Shape& b = c.input_shape(2);
         if ((!a.unknown_rank() && a.rank() != 2) || (!b.unknown_rank() && b.rank() != 2)) {
           return c.Error("factors must be matrices, got {} and {}", a, b);
         }
         if (a.fully_defined() && b.fully_defined() && sum.fully_defined() &&
             (a[ta ? 0 : 1] != b[tb ? 1 : 0] || sum != Shape{a[ta ? 1 : 0], b[tb ? 0 : 1]})) {
           return c.Error("{}{} x {}{} does not match the addend {}", a, ta ? "^T" : "", b,
                          tb ? "^T" : "", sum);
         }
         c.set_output(0, sum);
         return Status::OK();
       },
       .cost_fn =
           [](const CostContext& c) {
             OpCost cost = ElementwiseCost(c, 0);
             const Shape& a = c.input_shapes[1];
             const Shape& sum = c.output_shapes[0];
             if (a.fully_defined() && sum.fully_defined() && sum.rank() == 2) {
               cost.flops = 2.0 * a.num_elements() * sum[1];
             }
             return cost;
           }}));
  // MaxPool that also records where each maximum came from (u8, the offset in its window), and
  // the gradient that routes through those offsets, optionally masked by relu (where the
  // pooled value is > 0): neither reads the pooled input again.
  RETURN_IF_ERROR(r.Register(
      {.name = "_MaxPoolWithArgmax",
       .inputs = {{.name = "x", .type_attr = "T", .allowed = kFloatTypes}},
       .outputs = {{.name = "y", .type_attr = "T"}, {.name = "argmax", .fixed = DType::kU8}},
       .attrs = r.Find("MaxPool")->attrs,
       .shape_fn = [base = r.Find("MaxPool")->shape_fn](InferenceContext& c) -> Status {
         RETURN_IF_ERROR(base(c));
         c.set_output(1, c.output_shapes[0]);
         return Status::OK();
       },
       .cost_fn = ElementwiseCostFn(4)}));
  std::vector<AttrDef> grad_attrs = r.Find("MaxPool")->attrs;
  grad_attrs.push_back({"input_hw", AttrType::kIntList, std::nullopt});
  grad_attrs.push_back({"relu", AttrType::kBool, false});
  RETURN_IF_ERROR(
      r.Register({.name = "_MaxPoolGradWithArgmax",
                  .inputs = {{.name = "dy", .type_attr = "T", .allowed = kFloatTypes},
                             {.name = "argmax", .fixed = DType::kU8},
                             {.name = "y", .type_attr = "T"}},  // read only with relu
                  .outputs = {{.name = "dx", .type_attr = "T"}},
                  .attrs = grad_attrs,
                  .shape_fn = [](InferenceContext& c) -> Status {
                    ASSIGN_OR_RETURN(auto hw, c.GetAttr<std::vector<int64_t>>("input_hw"));
                    const Shape& dy = c.input_shape(0);
                    if (hw.size() != 2 || dy.unknown_rank() || dy.rank() != 4) {
                      return c.Error("needs input_hw [H, W] and a rank-4 dy, got {}", dy);
                    }
                    c.set_output(0, Shape{dy[0], dy[1], hw[0], hw[1]});
                    return Status::OK();
                  },
                  .cost_fn = ElementwiseCostFn(1)}));
  // y = (x - mean) / sqrt(var + epsilon) * scale + bias over the last axis (scale and bias [K]),
  // the LayerNorm a model exported op by op spells out (rewrite/subgraph_fusion.h).
  RETURN_IF_ERROR(r.Register(
      {.name = "_LayerNorm",
       .inputs = {{.name = "x", .type_attr = "T", .allowed = {DType::kF32}},
                  {.name = "scale", .type_attr = "T"},
                  {.name = "bias", .type_attr = "T"}},
       .outputs = {{.name = "y", .type_attr = "T"}},
       .attrs = {{"T", AttrType::kDType, std::nullopt}, {"epsilon", AttrType::kFloat, 1e-5}},
       .shape_fn = [](InferenceContext& c) -> Status {
         const Shape& x = c.input_shape(0);
         if (!x.unknown_rank() && x.rank() >= 1 && x[x.rank() - 1] >= 0) {
           for (int i : {1, 2}) {
             const Shape& s = c.input_shape(i);
             if (s.fully_defined() && s.num_elements() != x[x.rank() - 1]) {
               return c.Error("{} {} does not hold one value per element of the last axis of {}",
                              i == 1 ? "scale" : "bias", s, x);
             }
           }
         }
         c.set_output(0, x);
         return Status::OK();
       },
       .cost_fn = ElementwiseCostFn(8)}));
  // alpha * (a x b) + addend: an attention's scores (the product of queries and keys, divided by
  // the square root of their width, plus the mask). BatchMatMul's shapes; the addend broadcasts
  // to the product (each of its dimensions, counted from the last, 1 or the product's).
  const OpDef* bmm = r.Find("BatchMatMul");
  RETURN_IF_ERROR(r.Register(
      {.name = "_ScaledBatchMatMul",
       .inputs = {f32("a"), f32("b"), f32("addend")},
       .outputs = {f32("y")},
       .attrs = {{"T", AttrType::kDType, std::nullopt},
                 {"transpose_a", AttrType::kBool, false},
                 {"transpose_b", AttrType::kBool, false},
                 {"alpha", AttrType::kFloat, 1.0}},
       .shape_fn = [base = bmm->shape_fn](InferenceContext& c) -> Status {
         RETURN_IF_ERROR(base(c));
         const Shape& y = c.output_shapes[0];
         const Shape& addend = c.input_shape(2);
         if (y.unknown_rank() || addend.unknown_rank()) return Status::OK();
         if (addend.rank() > y.rank()) {
           return c.Error("addend {} has more dimensions than the product {}", addend, y);
         }
         for (int i = 1; i <= addend.rank(); ++i) {
           const int64_t d = addend[addend.rank() - i], p = y[y.rank() - i];
           if (d >= 0 && p >= 0 && d != 1 && d != p) {
             return c.Error("addend {} does not broadcast to the product {}", addend, y);
           }
         }
         return Status::OK();
       },
       .cost_fn = bmm->cost_fn}));
  // softmax(alpha * q k^T + mask) v per head: a self-attention's scores, mask, softmax and
  // values as one op that reads the heads from the projections' rows and writes [B, S, heads,
  // value_dim], so no Transpose moves them (ops/attention_dims.h gives the shapes).
  RETURN_IF_ERROR(r.Register(
      {.name = "_Attention",
       .inputs = {f32("q"), f32("k"), f32("v"), f32("mask")},
       .outputs = {f32("y")},
       .attrs = {{"T", AttrType::kDType, std::nullopt},
                 {"heads", AttrType::kInt, std::nullopt},
                 {"head_dim", AttrType::kInt, std::nullopt},
                 {"value_dim", AttrType::kInt, std::nullopt},
                 {"q_col", AttrType::kInt, int64_t{0}},
                 {"k_col", AttrType::kInt, int64_t{0}},
                 {"v_col", AttrType::kInt, int64_t{0}},
                 {"alpha", AttrType::kFloat, 1.0}},
       .shape_fn = [](InferenceContext& c) -> Status {
         ASSIGN_OR_RETURN(AttentionAttrs a, AttentionAttrsOf(c.node()));
         Result<AttentionDims> d = AttentionShapes(c.input_shape(0), c.input_shape(1),
                                                   c.input_shape(2), c.input_shape(3), a);
         if (!d.ok()) return c.Error("{}", d.status().message());
         c.set_output(0, d->out);
         return Status::OK();
       },
       .cost_fn =
           [](const CostContext& c) {
             // Two products per head ([S, d] x [d, Sk], [S, Sk] x [Sk, dv]) and the softmax.
             OpCost cost = ElementwiseCost(c, 0);
             const Shape& q = c.input_shapes[0];
             const Shape& k = c.input_shapes[1];
             const Shape& y = c.output_shapes[0];
             if (q.fully_defined() && k.fully_defined() && y.fully_defined() && y.rank() == 4) {
               const double heads = static_cast<double>(y[2]);
               const double d =
                   static_cast<double>(std::get<int64_t>(*c.node.FindAttr("head_dim")));
               const double scores = static_cast<double>(y[0]) * heads * y[1] * k[1];
               cost.flops = 2.0 * scores * (d + static_cast<double>(y[3])) + 8.0 * scores;
             }
             return cost;
           }}));
  RETURN_IF_ERROR(RegisterLayoutOps(r));
  return Status::OK();
}

// The CPU's blocked channel layout (rewrite/channel_blocks.h): activations as
// [N, ceil(C / b), H, W, b], channel c at [n, c / b, h, w, c % b], the padding channels 0.
Status RegisterLayoutOps(OpRegistry& r) {
  auto f32 = [](const char* name, bool variadic = false) {
    return ArgDef{.name = name, .type_attr = "T", .allowed = {DType::kF32}, .variadic = variadic};
  };
  std::vector<AttrDef> conv_attrs = r.Find("Conv2D")->attrs;
  conv_attrs.push_back({"block", AttrType::kInt, std::nullopt});
  conv_attrs.push_back({"x_blocked", AttrType::kBool, false});
  conv_attrs.push_back({"activation", AttrType::kString, std::string()});
  conv_attrs.push_back({"clip_min", AttrType::kFloat, 0.0});
  conv_attrs.push_back({"clip_max", AttrType::kFloat, 0.0});
  // y = activation(conv(x, w) + bias [+ residual]), y blocked; x blocked when x_blocked.
  RETURN_IF_ERROR(r.Register({.name = "_BlockedConv2D",
                              .inputs = {f32("x"), f32("w"), f32("bias_and_residual", true)},
                              .outputs = {f32("y")},
                              .attrs = conv_attrs,
                              .shape_fn = BlockedConvShape,
                              .cost_fn = r.Find("Conv2D")->cost_fn}));
  // y = dw_activation(depthwise3x3(activation(conv1x1(x, w) + bias), dw_w) + dw_bias), stride
  // dw_stride (1 or 2), padding 1: MobileNet's expanding convolution and the depthwise one after
  // it, whose expanded activation never goes to memory. The 1x1 convolution's attributes are
  // _BlockedConv2D's (stride 1, no padding, one group); dw_w is [C, 1, 3, 3], C its output
  // channels.
  std::vector<AttrDef> dw_attrs = conv_attrs;
  dw_attrs.push_back({"dw_stride", AttrType::kInt, int64_t{1}});
  dw_attrs.push_back({"dw_activation", AttrType::kString, std::string()});
  dw_attrs.push_back({"dw_clip_min", AttrType::kFloat, 0.0});
  dw_attrs.push_back({"dw_clip_max", AttrType::kFloat, 0.0});
  RETURN_IF_ERROR(r.Register(
      {.name = "_BlockedConvDw",
       .inputs = {f32("x"), f32("w"), f32("bias"), f32("dw_w"), f32("dw_bias")},
       .outputs = {f32("y")},
       .attrs = dw_attrs,
       .shape_fn = [](InferenceContext& c) -> Status {
         ASSIGN_OR_RETURN(int64_t block, BlockAttr(c));
         ASSIGN_OR_RETURN(bool x_blocked, c.GetAttr<bool>("x_blocked"));
         ASSIGN_OR_RETURN(int64_t stride, c.GetAttr<int64_t>("dw_stride"));
         for (const char* a : {"activation", "dw_activation"}) {
           ASSIGN_OR_RETURN(std::string act, c.GetAttr<std::string>(a));
           if (act != "" && act != "Relu" && act != "Clip") {
             return c.Error("unknown {} '{}'", a, act);
           }
         }
         if (stride != 1 && stride != 2) return c.Error("dw_stride {} (1 or 2)", stride);
         const Shape& x = c.input_shape(0);
         const Shape& w = c.input_shape(1);
         const Shape& dw = c.input_shape(3);
         if (!w.fully_defined() || w.rank() != 4 || w[2] != 1 || w[3] != 1) {
           return c.Error("needs a 1x1 filter [O, C, 1, 1], got {}", w);
         }
         if (!dw.fully_defined() || dw != Shape{w[0], 1, 3, 3}) {
           return c.Error("needs a depthwise filter [{}, 1, 3, 3], got {}", w[0], dw);
         }
         if (x.unknown_rank() || x.rank() != (x_blocked ? 5 : 4) || (x_blocked && x[4] != block) ||
             (!x_blocked && x[1] >= 0 && x[1] != w[1]) ||
             (x_blocked && x[1] >= 0 && x[1] != (w[1] + block - 1) / block)) {
           return c.Error("input {} is not {} of {} channels", x,
                          x_blocked ? "blocked [N, C/b, H, W, b]" : "[N, C, H, W]", w[1]);
         }
         for (int i : {2, 4}) {
           const Shape& b = c.input_shape(i);
           if (b.fully_defined() && b.num_elements() != w[0]) {
             return c.Error("bias {} does not have one value per output channel ({})", b, w[0]);
           }
         }
         auto out = [stride](int64_t in) { return in < 0 ? -1 : (in - 1) / stride + 1; };
         c.set_output(0, Blocked(Shape{x[0], w[0], out(x[2]), out(x[3])}, block));
         return Status::OK();
       },
       .cost_fn = r.Find("Conv2D")->cost_fn}));
  // MaxPool and AvgPool (their attributes) of a blocked x of `channels` channels, y blocked.
  for (const char* base : {"MaxPool", "AvgPool"}) {
    std::vector<AttrDef> attrs = r.Find(base)->attrs;
    attrs.push_back({"channels", AttrType::kInt, std::nullopt});
    RETURN_IF_ERROR(r.Register(
        {.name = std::string("_Blocked") + base,
         .inputs = {f32("x")},
         .outputs = {f32("y")},
         .attrs = attrs,
         .shape_fn = [base_fn = r.Find(base)->shape_fn](InferenceContext& c) -> Status {
           const Shape& x = c.input_shape(0);
           ASSIGN_OR_RETURN(auto k, c.GetAttr<std::vector<int64_t>>("ksize"));
           ASSIGN_OR_RETURN(auto s, c.GetAttr<std::vector<int64_t>>("strides"));
           ASSIGN_OR_RETURN(auto p, c.GetAttr<std::vector<int64_t>>("pads"));
           if (x.unknown_rank() || x.rank() != 5 || k.size() != 2 || s.size() != 2 ||
               p.size() != 4 || s[0] < 1 || s[1] < 1) {
             return c.Error("input {} is not blocked [N, C/b, H, W, b] or the window is wrong", x);
           }
           auto out = [&](int d) -> int64_t {
             const int64_t in = x[2 + d];
             return in < 0 ? -1 : std::max<int64_t>(0, (in + p[d] + p[d + 2] - k[d]) / s[d] + 1);
           };
           c.set_output(0, Shape{x[0], x[1], out(0), out(1), x[4]});
           return Status::OK();
         },
         .cost_fn = r.Find(base)->cost_fn}));
  }
  RETURN_IF_ERROR(r.Register(
      {.name = "_BlockChannels",
       .inputs = {f32("x")},
       .outputs = {f32("y")},
       .attrs = {{"T", AttrType::kDType, std::nullopt}, {"block", AttrType::kInt, std::nullopt}},
       .shape_fn = [](InferenceContext& c) -> Status {
         ASSIGN_OR_RETURN(int64_t block, BlockAttr(c));
         const Shape& x = c.input_shape(0);
         if (x.unknown_rank() || x.rank() != 4) return c.Error("input {} is not [N, C, H, W]", x);
         c.set_output(0, Blocked(x, block));
         return Status::OK();
       },
       .cost_fn = ElementwiseCostFn(1)}));
  return r.Register(
      {.name = "_UnblockChannels",
       .inputs = {f32("x")},
       .outputs = {f32("y")},
       .attrs = {{"T", AttrType::kDType, std::nullopt}, {"channels", AttrType::kInt, std::nullopt}},
       .shape_fn = [](InferenceContext& c) -> Status {
         ASSIGN_OR_RETURN(int64_t channels, c.GetAttr<int64_t>("channels"));
         const Shape& x = c.input_shape(0);
         if (x.unknown_rank() || x.rank() != 5 || x[4] <= 0 ||
             (x[1] >= 0 && (channels > x[1] * x[4] || channels <= (x[1] - 1) * x[4]))) {
           return c.Error("input {} is not [N, C/b, H, W, b] of {} channels", x, channels);
         }
         c.set_output(0, Shape{x[0], channels, x[2], x[3]});
         return Status::OK();
       },
       .cost_fn = ElementwiseCostFn(1)});
}

}  // namespace internal

}  // namespace dflow::ops
