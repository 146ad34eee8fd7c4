#include "ops/grad_ops.h"

#include "ops/array_ops.h"
#include "ops/op_defs.h"

namespace dflow::ops {
namespace internal {
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

}  // namespace internal

namespace {
Output Two(const char* op, const Scope& scope, Output a, Output b, AttrMap attrs = {}) {
  internal::RegisterOpDefinitions();
  return scope.OutputOf(scope.AddNode(op, {a, b}, std::move(attrs)));
}
}  // namespace

Output SumToShapeOf(const Scope& s, Output x, Output like) {
  return Two("SumToShapeOf", s, x, like);
}
Output ReshapeLike(const Scope& s, Output x, Output like) { return Two("ReshapeLike", s, x, like); }
Output ReduceGrad(const Scope& s, Output g, Output x, const std::vector<int64_t>& axes,
                  bool keep_dims, bool mean) {
  return Two("ReduceGrad", s, g, x, {{"axes", axes}, {"keep_dims", keep_dims}, {"mean", mean}});
}
Output ReluGrad(const Scope& s, Output g, Output x) { return Two("ReluGrad", s, g, x); }
Output LeakyReluGrad(const Scope& s, Output g, Output x, double alpha) {
  return Two("LeakyReluGrad", s, g, x, {{"alpha", alpha}});
}
Output GeluGrad(const Scope& s, Output g, Output x) { return Two("GeluGrad", s, g, x); }

Output ScalarConst(const Scope& scope, DType dtype, double value) {
  switch (dtype) {
    case DType::kF32:
      return Const(scope, static_cast<float>(value));
    case DType::kF64:
      return Const(scope, value);
    case DType::kI32:
      return Const(scope, static_cast<int32_t>(value));
    case DType::kI64:
      return Const(scope, static_cast<int64_t>(value));
    default:
      scope.UpdateStatus(InvalidArgument("ScalarConst: unsupported dtype {}", dtype));
      return Output();
  }
}

}  // namespace dflow::ops
