// The definitions (shape, cost, properties) and gradients of the ops gradients are built from
// (SumToShapeOf, ReshapeLike, ReduceGrad, the activation gradients).
#include "ops/defs/op_defs.h"

namespace dflow::ops::internal {
namespace {

Status ShapeOfInput1(InferenceContext& c) {
  c.set_output(0, c.input_shape(1));
  return Status::OK();
}

OpDef TwoInput(const std::string& name, ShapeFn shape, std::vector<DType> types,
               std::vector<AttrDef> extra = {}) {
  std::vector<AttrDef> attrs = {{"T", AttrType::kDType, std::nullopt}};
  attrs.insert(attrs.end(), extra.begin(), extra.end());
  return {.name = name,
          .inputs = {{.name = "x", .type_attr = "T", .allowed = types},
                     {.name = "like", .type_attr = "T", .allowed = types}},
          .outputs = {{.name = "y", .type_attr = "T"}},
          .attrs = std::move(attrs),
          .shape_fn = std::move(shape),
          .cost_fn = ElementwiseCostFn(1)};
}

}  // namespace

Status RegisterGradOps(OpRegistry& r) {
  RETURN_IF_ERROR(r.Register(TwoInput("SumToShapeOf", ShapeOfInput1, kNumericTypes)));
  OpDef reshape_like = TwoInput("ReshapeLike", ShapeOfInput1, kCastTypes);
  reshape_like.constant_cost = true;
  RETURN_IF_ERROR(r.Register(std::move(reshape_like)));
  RETURN_IF_ERROR(r.Register(TwoInput("ReduceGrad", ShapeOfInput1, kNumericTypes,
                                      {{"axes", AttrType::kIntList, std::vector<int64_t>{}},
                                       {"keep_dims", AttrType::kBool, false},
                                       {"mean", AttrType::kBool, false}})));
  OpDef relu_grad = TwoInput("ReluGrad", SameShapeAsInput0, kNumericTypes);
  relu_grad.elementwise = true;
  relu_grad.epilogue = Epilogue::kReluGrad;
  RETURN_IF_ERROR(r.Register(std::move(relu_grad)));
  OpDef leaky_grad =
      TwoInput("LeakyReluGrad", SameShapeAsInput0, kFloatTypes, {{"alpha", AttrType::kFloat, 0.2}});
  leaky_grad.elementwise = true;
  RETURN_IF_ERROR(r.Register(std::move(leaky_grad)));
  OpDef gelu_grad = TwoInput("GeluGrad", SameShapeAsInput0, kFloatTypes);
  gelu_grad.elementwise = true;
  RETURN_IF_ERROR(r.Register(std::move(gelu_grad)));
  return Status::OK();
}

}  // namespace dflow::ops::internal
