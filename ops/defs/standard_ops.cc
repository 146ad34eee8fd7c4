// RegisterOpDefinitions (ops/op_definitions.h): every family's definitions, in order, once.
#include <cstdio>
#include <mutex>

#include "ops/defs/op_defs.h"
#include "ops/op_definitions.h"

namespace dflow::ops::internal {

void RegisterOpDefinitions() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpRegistry& r = OpRegistry::Global();
    Status s = RegisterArrayOps(r);
    if (s.ok()) s = RegisterMathOps(r);
    if (s.ok()) s = RegisterStateOps(r);
    if (s.ok()) s = RegisterUnaryOps(r);
    if (s.ok()) s = RegisterLogicOps(r);
    if (s.ok()) s = RegisterNnOps(r);
    if (s.ok()) s = RegisterTrainingOps(r);
    if (s.ok()) s = RegisterGradOps(r);
    if (s.ok()) s = RegisterRandomOps(r);
    if (s.ok()) s = RegisterConvOps(r);
    if (s.ok()) s = RegisterManipOps(r);
    if (s.ok()) s = RegisterIndexOps(r);
    if (s.ok()) s = RegisterShapeOps(r);
    if (s.ok()) s = RegisterImageOps(r);
    if (s.ok()) s = RegisterBatchNormOps(r);
    if (s.ok()) s = RegisterFusedOps(r);
    if (s.ok()) s = RegisterSendRecvOps(r);
    if (!s.ok()) {
      std::fprintf(stderr, "dflow: registering the standard ops failed: %s\n",
                   s.ToString().c_str());
      std::abort();
    }
  });
}

}  // namespace dflow::ops::internal
