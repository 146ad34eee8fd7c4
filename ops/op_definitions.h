// RegisterOpDefinitions: every standard op's definition (its shape function, cost, properties
// and gradient; ops/defs/), registered once, without kernels. The builder functions (ops/*_ops.h)
// call it before they add a node; RegisterStandardOps (ops/register.h) adds the kernels.
#pragma once

namespace dflow::ops::internal {

void RegisterOpDefinitions();

}  // namespace dflow::ops::internal
