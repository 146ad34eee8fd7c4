#include "ops/cuda/register_cuda.h"

#include "ops/common/common_kernels.h"
#include "ops/cuda/cuda_kernels.h"

namespace dflow::cuda {

Status RegisterCudaKernels() {
  // Feeds, fetches, constants, variables and Send/Recv, through the device's copies.
  RETURN_IF_ERROR(common::RegisterDeviceMemoryKernels("GPU"));
  RETURN_IF_ERROR(RegisterElementwiseKernels());
  RETURN_IF_ERROR(RegisterMatMulKernels());
  RETURN_IF_ERROR(RegisterTrainingKernels());
  RETURN_IF_ERROR(RegisterConvKernels());
  RETURN_IF_ERROR(RegisterPoolKernels());
  RETURN_IF_ERROR(RegisterBatchNormKernels());
  RETURN_IF_ERROR(RegisterSoftmaxKernels());
  return Status::OK();
}

}  // namespace dflow::cuda
