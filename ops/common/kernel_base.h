// The shape every op family's shared kernel base (ops/common/*_kernels.h) takes: the base's
// Compute reads and checks what every device's kernel of the op needs, in the same words on
// every device, then hands it to the device's kernel (Derived::Run), which only computes.
//
//   class FillKernel : public common::FillBase<FillKernel, 0> {
//    public:
//     using FillBase::FillBase;
//     Status Run(KernelContext& ctx, Tensor& out);  // out allocated and shaped by the base
//   };
#pragma once

#include "framework/kernel.h"

namespace dflow::common {

template <typename Derived>
class KernelBase : public OpKernel {
 protected:
  Derived& derived() { return static_cast<Derived&>(*this); }
};

}  // namespace dflow::common
