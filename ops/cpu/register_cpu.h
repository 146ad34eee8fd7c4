// The one call that registers every CPU kernel (framework/kernel.h) under device type "CPU".
// ops::RegisterStandardOps() makes it; call it directly only to use the CPU kernels alone.
#pragma once

#include "graph/status.h"

namespace dflow::cpu {

Status RegisterCpuKernels();

}  // namespace dflow::cpu
