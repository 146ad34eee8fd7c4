#include "ops/register.h"

#include <cstdio>
#include <mutex>

#include "ops/cpu/register_cpu.h"
#include "ops/op_defs.h"
#if DFLOW_WITH_CUDA
#include "ops/cuda/register_cuda.h"
#endif

namespace dflow::ops {

void RegisterStandardOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    internal::RegisterOpDefinitions();
    // One line per kernel backend built.
    Status s = cpu::RegisterCpuKernels();
#if DFLOW_WITH_CUDA
    if (s.ok()) s = cuda::RegisterCudaKernels();
#endif
    if (!s.ok()) {
      std::fprintf(stderr, "dflow: registering the standard kernels failed: %s\n",
                   s.ToString().c_str());
      std::abort();
    }
  });
}

}  // namespace dflow::ops
