#include "ops/cpu/cpu_kernels.h"

#include "ops/op_defs.h"

namespace dflow::ops::internal {

Status RegisterCpuKernels() {
  RETURN_IF_ERROR(cpu::RegisterArrayKernels());
  RETURN_IF_ERROR(cpu::RegisterElementwiseKernels());
  RETURN_IF_ERROR(cpu::RegisterMatMulKernels());
  RETURN_IF_ERROR(cpu::RegisterReduceKernels());
  RETURN_IF_ERROR(cpu::RegisterStateKernels());
  RETURN_IF_ERROR(cpu::RegisterUnaryKernels());
  RETURN_IF_ERROR(cpu::RegisterNnKernels());
  RETURN_IF_ERROR(cpu::RegisterTrainingKernels());
  RETURN_IF_ERROR(cpu::RegisterRandomKernels());
  RETURN_IF_ERROR(cpu::RegisterConvKernels());
  RETURN_IF_ERROR(cpu::RegisterPoolKernels());
  RETURN_IF_ERROR(cpu::RegisterManipKernels());
  RETURN_IF_ERROR(cpu::RegisterBatchNormKernels());
  RETURN_IF_ERROR(cpu::RegisterFusedUpdateKernels());
  RETURN_IF_ERROR(cpu::RegisterSendRecvKernels());
  return Status::OK();
}

}  // namespace dflow::ops::internal
