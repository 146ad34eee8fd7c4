// Internal: registration of the GPU kernels, one function per family (cuda_backend.cc calls
// them all).
#pragma once

#include "framework/kernel.h"

namespace dflow::cuda {

Status RegisterElementwiseKernels();
Status RegisterMatMulKernels();
Status RegisterTrainingKernels();
// Convolutions, batch normalization and softmax on cuDNN; pooling.
Status RegisterConvKernels();
Status RegisterPoolKernels();
Status RegisterBatchNormKernels();
Status RegisterSoftmaxKernels();

}  // namespace dflow::cuda
