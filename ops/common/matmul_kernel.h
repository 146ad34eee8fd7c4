// What the matrix-product kernels of every device share (ops/common/kernel_base.h): MatMul,
// BatchMatMul and _FusedMatMul read their attributes and fused epilogue once and check shapes
// and the bias alike (ops/matmul_shape.h).
#pragma once

#include <variant>

#include "ops/common/kernel_base.h"
#include "ops/fused_epilogue.h"
#include "ops/matmul_shape.h"

namespace dflow::common {

// Derived::Run(ctx, a, b, dims), with ta_, tb_ and epilogue_ to hand.
template <typename Derived>
class MatMulBase : public KernelBase<Derived> {
 public:
  explicit MatMulBase(const KernelInit& init)
      : ta_(std::get<bool>(*init.node.FindAttr("transpose_a"))),
        tb_(std::get<bool>(*init.node.FindAttr("transpose_b"))),
        epilogue_(FusedEpilogue::Of(init.node)) {}
  Status Compute(KernelContext& ctx) final {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    ASSIGN_OR_RETURN(MatMulDims d, MatMulShapes(a.shape(), b.shape(), ta_, tb_));
    if (epilogue_.bias &&
        (ctx.input(2).num_elements() != d.n || ctx.input(2).dtype() != a.dtype())) {
      return InvalidArgument("bias {}{} does not have one value per output column ({})",
                             ctx.input(2).dtype(), ctx.input(2).shape(), d.n);
    }
    return this->derived().Run(ctx, a, b, d);
  }

 protected:
  const bool ta_, tb_;  // the transpose_a and transpose_b attributes
  const FusedEpilogue epilogue_;
};

}  // namespace dflow::common
