// What the neural-network kernels of every device share (ops/common/kernel_base.h): softmax over
// the last axis and sparse softmax cross-entropy check their operands alike.
#pragma once

#include "ops/common/kernel_base.h"

namespace dflow::common {

// Softmax and LogSoftmax over the last axis: Derived::Run(ctx, x, classes).
template <typename Derived>
class SoftmaxBase : public KernelBase<Derived> {
 public:
  explicit SoftmaxBase(const KernelInit&) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& x = ctx.input(0);
    if (x.shape().rank() < 1) return InvalidArgument("logits must have rank >= 1");
    return this->derived().Run(ctx, x, x.shape()[x.shape().rank() - 1]);
  }
};

// SparseSoftmaxCrossEntropyWithLogits: logits [N, C] and labels [N] (i32 or i64);
// Derived::Run(ctx, logits, labels, n, c).
template <typename Derived>
class CrossEntropyBase : public KernelBase<Derived> {
 public:
  explicit CrossEntropyBase(const KernelInit&) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& logits = ctx.input(0);
    const Tensor& labels = ctx.input(1);
    if (logits.shape().rank() != 2 || labels.shape().rank() != 1 ||
        labels.shape()[0] != logits.shape()[0]) {
      return InvalidArgument("logits {} and labels {} do not match: expected [N,C] and [N]",
                             logits.shape(), labels.shape());
    }
    if (labels.dtype() != DType::kI32 && labels.dtype() != DType::kI64) {
      return InvalidArgument("labels are {}, not i32 or i64", labels.dtype());
    }
    return this->derived().Run(ctx, logits, labels, logits.shape()[0], logits.shape()[1]);
  }
};

}  // namespace dflow::common
