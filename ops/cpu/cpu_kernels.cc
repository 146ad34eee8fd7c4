#include "ops/cpu/cpu_kernels.h"

#include "ops/common/common_kernels.h"
#include "ops/cpu/register_cpu.h"

namespace dflow::cpu {

Status RegisterCpuKernels() {
  RETURN_IF_ERROR(RegisterArrayKernels());
  RETURN_IF_ERROR(RegisterElementwiseKernels());
  RETURN_IF_ERROR(RegisterMatMulKernels());
  RETURN_IF_ERROR(RegisterReduceKernels());
  RETURN_IF_ERROR(RegisterStateKernels());
  RETURN_IF_ERROR(RegisterUnaryKernels());
  RETURN_IF_ERROR(RegisterNnKernels());
  RETURN_IF_ERROR(RegisterTrainingKernels());
  RETURN_IF_ERROR(RegisterRandomKernels());
  RETURN_IF_ERROR(RegisterConvKernels());
  RETURN_IF_ERROR(RegisterPoolKernels());
  RETURN_IF_ERROR(RegisterManipKernels());
  RETURN_IF_ERROR(RegisterBatchNormKernels());
  RETURN_IF_ERROR(RegisterFusedUpdateKernels());
  RETURN_IF_ERROR(common::RegisterCommonKernels("CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
