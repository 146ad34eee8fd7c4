// What the convolution kernels of every device share (ops/common/kernel_base.h): Conv2D,
// _FusedConv2D and their gradients read their attributes and fused epilogue once and work out
// the pass's shapes alike (ops/conv_geometry.h).
#pragma once

#include <string>

#include "ops/common/kernel_base.h"
#include "ops/conv_geometry.h"
#include "ops/fused_epilogue.h"

namespace dflow::common {

// Derived::Run(ctx, in0, in1, shapes): the pass's inputs 0 and 1 (x and w, dy and w, or x and
// dy), its geometry and output shape; attrs_ and epilogue_ to hand.
template <typename Derived, ConvPass kPass>
class ConvBase : public KernelBase<Derived> {
 public:
  explicit ConvBase(const KernelInit& init)
      : attrs_(ReadConvAttrs(init.node)), epilogue_(FusedEpilogue::Of(init.node)) {}
  Status Compute(KernelContext& ctx) final {
    static const Shape kNone{};
    const Tensor& in0 = ctx.input(0);
    const Tensor& in1 = ctx.input(1);
    const Shape& bias = ctx.num_inputs() > 2 ? ctx.input(2).shape() : kNone;
    ASSIGN_OR_RETURN(ConvPassShapes shapes, ConvPassShapesOf(attrs_, kPass, epilogue_.bias,
                                                             in0.shape(), in1.shape(), bias));
    return this->derived().Run(ctx, in0, in1, shapes);
  }

 protected:
  const ConvAttrs attrs_;
  const FusedEpilogue epilogue_;
};

// Registers Kernel<pass> on `device_type` for each op of the family: Conv2D and _FusedConv2D
// (forward), Conv2DBackpropInput and Conv2DBackpropFilter.
template <template <ConvPass> class Kernel>
Status RegisterConvKernels(const std::string& device_type) {
  RETURN_IF_ERROR(RegisterKernel<Kernel<ConvPass::kForward>>("Conv2D", device_type));
  RETURN_IF_ERROR(RegisterKernel<Kernel<ConvPass::kForward>>("_FusedConv2D", device_type));
  RETURN_IF_ERROR(
      RegisterKernel<Kernel<ConvPass::kBackwardData>>("Conv2DBackpropInput", device_type));
  return RegisterKernel<Kernel<ConvPass::kBackwardFilter>>("Conv2DBackpropFilter", device_type);
}

}  // namespace dflow::common
