// What the element-wise kernels of every device share (ops/common/kernel_base.h): binary ops
// broadcast alike, BiasAdd, Cast and the activation gradients check and shape alike.
#pragma once

#include <variant>

#include "ops/broadcast.h"
#include "ops/common/kernel_base.h"

namespace dflow::common {

// A binary element-wise op: Derived::Run(ctx, a, b, out_shape) with the broadcast shape of a
// and b.
template <typename Derived>
class BinaryBase : public KernelBase<Derived> {
 public:
  explicit BinaryBase(const KernelInit&) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    ASSIGN_OR_RETURN(Shape out, BinaryOutputShape(a, b));
    return this->derived().Run(ctx, a, b, out);
  }
};

// Select(c, a, b): InvalidArgument unless the three broadcast together (their dtypes are the
// op definition's to check); then Derived::Run(ctx, c, a, b, out_shape).
template <typename Derived>
class SelectBase : public KernelBase<Derived> {
 public:
  explicit SelectBase(const KernelInit&) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& c = ctx.input(0);
    const Tensor& a = ctx.input(1);
    const Tensor& b = ctx.input(2);
    ASSIGN_OR_RETURN(Shape ab, BroadcastShape(a.shape(), b.shape()));
    ASSIGN_OR_RETURN(Shape shape, BroadcastShape(c.shape(), ab));
    return this->derived().Run(ctx, c, a, b, shape);
  }
};

// An activation's gradient (ReluGrad, LeakyReluGrad, GeluGrad: g and the activation's input x):
// InvalidArgument unless g and x agree in dtype and shape; then Derived::Run(ctx, g, x).
template <typename Derived>
class ActivationGradBase : public KernelBase<Derived> {
 public:
  explicit ActivationGradBase(const KernelInit&) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& g = ctx.input(0);
    const Tensor& x = ctx.input(1);
    if (g.shape() != x.shape() || g.dtype() != x.dtype()) {
      return InvalidArgument("gradient {}{} differs from input {}{}", g.dtype(), g.shape(),
                             x.dtype(), x.shape());
    }
    return this->derived().Run(ctx, g, x);
  }
};

// BiasAdd: InvalidArgument unless bias is a vector of x's dtype with one value per element of
// x's last dimension; then Derived::Run(ctx, x, bias).
template <typename Derived>
class BiasAddBase : public KernelBase<Derived> {
 public:
  explicit BiasAddBase(const KernelInit&) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& x = ctx.input(0);
    const Tensor& bias = ctx.input(1);
    if (x.shape().rank() < 1 || bias.shape().rank() != 1 ||
        x.shape()[x.shape().rank() - 1] != bias.shape()[0] || x.dtype() != bias.dtype()) {
      return InvalidArgument("bias {}{} does not match the last dimension of input {}{}",
                             bias.dtype(), bias.shape(), x.dtype(), x.shape());
    }
    return this->derived().Run(ctx, x, bias);
  }
};

// Cast to the node's DstT: a cast to the input's own dtype is the input itself; otherwise
// Derived::Run(ctx, x, dst).
template <typename Derived>
class CastBase : public KernelBase<Derived> {
 public:
  explicit CastBase(const KernelInit& init) : dst_(std::get<DType>(*init.node.FindAttr("DstT"))) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == dst_) {
      ctx.set_output(0, x);
      return Status::OK();
    }
    return this->derived().Run(ctx, x, dst_);
  }

 private:
  DType dst_;
};

}  // namespace dflow::common
