// What the reduction kernels of every device share (ops/common/kernel_base.h): attributes read
// once and the reduced dimensions worked out alike (ops/reduction.h).
#pragma once

#include <variant>
#include <vector>

#include "ops/common/kernel_base.h"
#include "ops/reduction.h"

namespace dflow::common {

// A reduction over the node's "axes", keeping the reduced dimensions as 1 with "keep_dims":
// Derived::Run(ctx, x, reduced, out_shape).
template <typename Derived>
class ReduceBase : public KernelBase<Derived> {
 public:
  explicit ReduceBase(const KernelInit& init)
      : axes_(std::get<std::vector<int64_t>>(*init.node.FindAttr("axes"))),
        keep_dims_(std::get<bool>(*init.node.FindAttr("keep_dims"))) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& x = ctx.input(0);
    ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedAxes(x.shape(), axes_));
    return this->derived().Run(ctx, x, reduced, ReducedShape(x.shape(), reduced, keep_dims_));
  }

 private:
  const std::vector<int64_t> axes_;
  const bool keep_dims_;
};

// SumToShapeOf(x, like): x itself when it has like's shape; otherwise
// Derived::Run(ctx, x, reduced, like) summing x down over the dimensions broadcasting added.
template <typename Derived>
class SumToShapeOfBase : public KernelBase<Derived> {
 public:
  explicit SumToShapeOfBase(const KernelInit&) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& x = ctx.input(0);
    const Shape& like = ctx.input(1).shape();
    if (x.shape() == like) {
      ctx.set_output(0, x);
      return Status::OK();
    }
    ASSIGN_OR_RETURN(std::vector<bool> reduced, SumToShapeAxes(x.shape(), like));
    return this->derived().Run(ctx, x, reduced, like);
  }
};

// ReduceGrad(g, like): the gradient of a reduction over "axes" of like's shape (a mean's with
// "mean"), spread back over it: Derived::Run(ctx, g, in_shape, reduced, mean).
template <typename Derived>
class ReduceGradBase : public KernelBase<Derived> {
 public:
  explicit ReduceGradBase(const KernelInit& init)
      : axes_(std::get<std::vector<int64_t>>(*init.node.FindAttr("axes"))),
        mean_(std::get<bool>(*init.node.FindAttr("mean"))) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& g = ctx.input(0);
    const Shape& in = ctx.input(1).shape();
    ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedAxes(in, axes_));
    int64_t kept = 1;
    for (int d = 0; d < in.rank(); ++d) kept *= reduced[d] ? 1 : in[d];
    if (g.num_elements() != kept) {
      return InvalidArgument("gradient {} does not match the reduction of {}", g.shape(), in);
    }
    return this->derived().Run(ctx, g, in, reduced, mean_);
  }

 private:
  const std::vector<int64_t> axes_;
  const bool mean_;
};

}  // namespace dflow::common
