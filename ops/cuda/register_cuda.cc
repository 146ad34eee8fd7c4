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
  return Status::OK();
}

}  // namespace dflow::cuda
