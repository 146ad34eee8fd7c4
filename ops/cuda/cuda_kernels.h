// Internal: registration of the GPU kernels, one function per family, as the CPU's families
// (cuda_backend.cc calls them all).
#pragma once

#include "framework/kernel.h"

namespace dflow::cuda {

Status RegisterArrayKernels();
Status RegisterElementwiseKernels();
Status RegisterUnaryKernels();
Status RegisterReduceKernels();
Status RegisterMatMulKernels();
Status RegisterNnKernels();
Status RegisterTrainingKernels();
// Convolutions and batch normalization on cuDNN; pooling on own kernels.
Status RegisterConvKernels();
Status RegisterPoolKernels();
Status RegisterBatchNormKernels();

}  // namespace dflow::cuda
