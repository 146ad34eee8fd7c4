// Internal to ops/defs/: the registration functions of each op family, which
// RegisterOpDefinitions() calls in turn, and what their definitions share.
#pragma once

#include "graph/op_registry.h"
#include "ops/op_definitions.h"

namespace dflow::ops::internal {

Status RegisterArrayOps(OpRegistry& registry);
Status RegisterMathOps(OpRegistry& registry);
Status RegisterStateOps(OpRegistry& registry);
Status RegisterUnaryOps(OpRegistry& registry);
Status RegisterLogicOps(OpRegistry& registry);
Status RegisterNnOps(OpRegistry& registry);
Status RegisterTrainingOps(OpRegistry& registry);
Status RegisterGradOps(OpRegistry& registry);
Status RegisterRandomOps(OpRegistry& registry);
Status RegisterConvOps(OpRegistry& registry);
Status RegisterManipOps(OpRegistry& registry);
Status RegisterIndexOps(OpRegistry& registry);
Status RegisterShapeOps(OpRegistry& registry);
Status RegisterImageOps(OpRegistry& registry);
Status RegisterBatchNormOps(OpRegistry& registry);
// After the math and convolution ops: the fused ops copy their definitions.
Status RegisterFusedOps(OpRegistry& registry);
Status RegisterSendRecvOps(OpRegistry& registry);

// Float and integer dtypes the CPU arithmetic kernels support.
inline const std::vector<DType> kNumericTypes = {DType::kF32, DType::kF64, DType::kI32,
                                                 DType::kI64};
inline const std::vector<DType> kFloatTypes = {DType::kF32, DType::kF64};
inline const std::vector<DType> kCastTypes = {DType::kF32, DType::kF64, DType::kI32,
                                              DType::kI64, DType::kU8,  DType::kBool};
// MatMul's and the convolutions': the float types, and f16 and bf16, which only GPU kernels
// compute (with f32 accumulation); Cast converts to and from them on every device.
inline const std::vector<DType> kDenseTypes = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};
inline const std::vector<DType> kConvertTypes = {DType::kF32,  DType::kF64, DType::kF16,
                                                 DType::kBF16, DType::kI32, DType::kI64,
                                                 DType::kU8,   DType::kBool};

// Index and axis operands: i32 or i64.
inline const std::vector<DType> kIndexTypes = {DType::kI32, DType::kI64};

// Cost of ops that only relabel a buffer or read shapes.
inline OpCost Free(const CostContext&) { return {}; }
// Gradient of ops whose output does not depend on their inputs' values: none flows back.
inline Status NoGradient(GradContext&) { return Status::OK(); }

// Shape function of ops whose output has the shape of input 0.
Status SameShapeAsInput0(InferenceContext& c);
// Shape function of element-wise binary ops: the broadcast shape of inputs 0 and 1.
Status BroadcastShapeFn(InferenceContext& c);
// Cost of element-wise ops: `flops` per output element, every byte moved once.
inline CostFn ElementwiseCostFn(double flops) {
  return [flops](const CostContext& c) { return ElementwiseCost(c, flops); };
}

}  // namespace dflow::ops::internal
