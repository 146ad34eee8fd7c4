// The fused ops the fusion rewrite makes (rewrite/fusion.h): they exist only in compiled plans,
// never in a user's graph, and have no gradient.
#include "ops/defs/op_defs.h"

namespace dflow::ops {
namespace internal {
namespace {

// The fused op's shape function: the base op's on inputs 0 and 1, then a check that the bias
// (input 2) has one value per output channel: the last dimension for MatMul, dimension 1 for
// Conv2D.
ShapeFn FusedShape(ShapeFn base, int channel_axis) {
  return [base = std::move(base), channel_axis](InferenceContext& c) -> Status {
    RETURN_IF_ERROR(base(c));
    ASSIGN_OR_RETURN(std::string act, c.GetAttr<std::string>("activation"));
    if (act != "" && act != "Relu") return c.Error("unknown activation '{}'", act);
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
  return Status::OK();
}

}  // namespace internal

}  // namespace dflow::ops
