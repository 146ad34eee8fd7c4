#include "ops/register.h"

#include <cstdio>
#include <mutex>

#include "ops/op_defs.h"

namespace dflow::ops {

void RegisterStandardOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpRegistry& r = OpRegistry::Global();
    Status s = internal::RegisterArrayOps(r);
    if (s.ok()) s = internal::RegisterMathOps(r);
    if (s.ok()) s = internal::RegisterStateOps(r);
    if (s.ok()) s = internal::RegisterUnaryOps(r);
    if (s.ok()) s = internal::RegisterLogicOps(r);
    if (s.ok()) s = internal::RegisterNnOps(r);
    if (s.ok()) s = internal::RegisterTrainingOps(r);
    if (s.ok()) s = internal::RegisterGradOps(r);
    if (s.ok()) s = internal::RegisterRandomOps(r);
    if (s.ok()) s = internal::RegisterConvOps(r);
    if (s.ok()) s = internal::RegisterManipOps(r);
    if (s.ok()) s = internal::RegisterBatchNormOps(r);
    if (s.ok()) s = internal::RegisterFusedOps(r);
    if (s.ok()) s = internal::RegisterSendRecvOps(r);
    if (s.ok()) s = internal::RegisterCpuKernels();
    if (!s.ok()) {
      std::fprintf(stderr, "dflow: registering the standard ops failed: %s\n",
                   s.ToString().c_str());
      std::abort();
    }
  });
}

}  // namespace dflow::ops
