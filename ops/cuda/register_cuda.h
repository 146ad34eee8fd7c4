// The one call that registers every GPU kernel (framework/kernel.h) under device type "GPU",
// built where the CUDA toolkit is found (DFLOW_WITH_CUDA). ops::RegisterStandardOps() makes it.
#pragma once

#include "graph/status.h"

namespace dflow::cuda {

Status RegisterCudaKernels();

}  // namespace dflow::cuda
