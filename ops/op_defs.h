// Internal: the registration functions of each op family, called by RegisterStandardOps().
#pragma once

#include "graph/op_registry.h"

namespace dflow::ops::internal {

Status RegisterArrayOps(OpRegistry& registry);
Status RegisterMathOps(OpRegistry& registry);
Status RegisterStateOps(OpRegistry& registry);
Status RegisterCpuKernels();

// Float and integer dtypes the CPU arithmetic kernels support.
inline const std::vector<DType> kNumericTypes = {DType::kF32, DType::kF64, DType::kI32,
                                                 DType::kI64};
inline const std::vector<DType> kFloatTypes = {DType::kF32, DType::kF64};

}  // namespace dflow::ops::internal
