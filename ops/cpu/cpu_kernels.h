// Internal: registration of the CPU kernels, one function per family.
#pragma once

#include "framework/kernel.h"

namespace dflow::cpu {

Status RegisterArrayKernels();
Status RegisterElementwiseKernels();
Status RegisterMatMulKernels();
Status RegisterAttentionKernels();
Status RegisterReduceKernels();
Status RegisterStateKernels();
Status RegisterUnaryKernels();
Status RegisterNnKernels();
Status RegisterTrainingKernels();
Status RegisterRandomKernels();
Status RegisterConvKernels();
// The channel block of the blocked layout the convolutions prefer on this CPU: 16 with
// AVX-512, 8 with AVX2, 0 (no blocked layout) below.
int ChannelBlock();
Status RegisterPoolKernels();
Status RegisterManipKernels();
Status RegisterIndexKernels();
Status RegisterShapeKernels();
Status RegisterImageKernels();
Status RegisterBatchNormKernels();
Status RegisterFusedUpdateKernels();

}  // namespace dflow::cpu
