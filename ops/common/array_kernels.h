// What the array kernels of every device share (ops/common/kernel_base.h): Fill, ZerosLike and
// OnesLike read their value, dtype and shape alike, AddN checks its inputs alike.
#pragma once

#include <variant>
#include <vector>

#include "ops/common/kernel_base.h"

namespace dflow::common {

// Fill (kFromInput < 0: attribute shape, dtype and value), ZerosLike (0) or OnesLike (1: the
// input's shape and dtype). Derived::Run(ctx, out) writes value() into every element of `out`.
template <typename Derived, int kFromInput>
class FillBase : public KernelBase<Derived> {
 public:
  explicit FillBase(const KernelInit& init) {
    if constexpr (kFromInput < 0) {
      value_ = std::get<double>(*init.node.FindAttr("value"));
      shape_ = std::get<Shape>(*init.node.FindAttr("shape"));
      dtype_ = std::get<DType>(*init.node.FindAttr("dtype"));
    } else {
      value_ = kFromInput;
    }
  }
  Status Compute(KernelContext& ctx) final {
    const DType dtype = kFromInput < 0 ? dtype_ : ctx.input(0).dtype();
    const Shape& shape = kFromInput < 0 ? shape_ : ctx.input(0).shape();
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dtype, shape));
    return this->derived().Run(ctx, *out);
  }
  double value() const { return value_; }

 private:
  double value_ = 0;
  Shape shape_;
  DType dtype_ = DType::kInvalid;
};

// ElementCount: the product of the input's dimensions along the node's axes (all when empty),
// InvalidArgument naming an axis out of range; then Derived::Run(ctx, out, count) with `out` a
// scalar of the input's dtype.
template <typename Derived>
class ElementCountBase : public KernelBase<Derived> {
 public:
  explicit ElementCountBase(const KernelInit& init)
      : axes_(std::get<std::vector<int64_t>>(*init.node.FindAttr("axes"))) {}
  Status Compute(KernelContext& ctx) final {
    const Shape& x = ctx.input(0).shape();
    int64_t count = 1;
    if (axes_.empty()) {
      count = x.num_elements();
    } else {
      for (int64_t a : axes_) {
        if (a < -x.rank() || a >= x.rank()) {
          return InvalidArgument("axis {} is out of range for input {}", a, x);
        }
        count *= x[a < 0 ? a + x.rank() : a];
      }
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, ctx.input(0).dtype(), Shape{}));
    return this->derived().Run(ctx, *out, count);
  }

 private:
  std::vector<int64_t> axes_;
};

// AddN: InvalidArgument unless every input has input 0's dtype and shape; then
// Derived::Run(ctx, first) with `first` input 0.
template <typename Derived>
class AddNBase : public KernelBase<Derived> {
 public:
  explicit AddNBase(const KernelInit&) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& first = ctx.input(0);
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).shape() != first.shape() || ctx.input(i).dtype() != first.dtype()) {
        return InvalidArgument("input {} is {}{} but input 0 is {}{}", i, ctx.input(i).dtype(),
                               ctx.input(i).shape(), first.dtype(), first.shape());
      }
    }
    return this->derived().Run(ctx, first);
  }
};

}  // namespace dflow::common
