// GPU kernels of the element-wise binary ops: Add, Sub, Mul, Div, Maximum, Minimum (NumPy
// broadcasting up to rank 8, f32, f64, i32, i64; integer Div is refused, InvalidArgument: the
// CPU kernel's check for a zero divisor would need a copy to the host) and BiasAdd. Each checks
// shapes on the host as the CPU's do (ops/common/elementwise_kernels.h), allocates its output on
// the device and launches on the device's compute stream (ops/cuda/cuda_context.h), then
// returns without waiting.
#include "ops/common/elementwise_kernels.h"

#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

template <BinaryOp kOp>
class BinaryKernel : public common::BinaryBase<BinaryKernel<kOp>> {
 public:
  using common::BinaryBase<BinaryKernel>::BinaryBase;
  Status Run(KernelContext& ctx, const Tensor& a, const Tensor& b, const Shape& shape) {
    auto type = ElemTypeOf(a.dtype());
    if (!type) return InvalidArgument("no GPU kernel for dtype {}", a.dtype());
    if (kOp == BinaryOp::kDiv && *type != ElemType::kF32 && *type != ElemType::kF64) {
      // The CPU kernel refuses a zero divisor; here it could not be seen without a copy.
      return InvalidArgument("no GPU kernel for integer Div ({}): run it on a CPU", a.dtype());
    }
    if (shape.rank() > kMaxRank) {
      return InvalidArgument("GPU element-wise ops take rank {} at most, not {}", kMaxRank,
                             shape.rank());
    }
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, a.dtype(), shape));
    BroadcastIndex index;
    const bool broadcast = a.shape() != b.shape();
    if (broadcast) {
      index.rank = shape.rank();
      for (int d = 0; d < shape.rank(); ++d) index.out_dims[d] = shape[d];
      BroadcastStrides(a.shape(), shape, index.a_strides);
      BroadcastStrides(b.shape(), shape, index.b_strides);
    }
    return Launched(LaunchBinary(kOp, *type, a.raw_data(), b.raw_data(), out->raw_data(),
                                 shape.num_elements(), broadcast ? &index : nullptr, stream),
                    "an element-wise op");
  }
};

class BiasAddKernel : public common::BiasAddBase<BiasAddKernel> {
 public:
  using BiasAddBase::BiasAddBase;
  Status Run(KernelContext& ctx, const Tensor& x, const Tensor& bias) {
    ASSIGN_OR_RETURN(ElemType type, TypeOf(x));
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
    return Launched(LaunchBiasAdd(type, x.raw_data(), bias.raw_data(), out->raw_data(),
                                  x.num_elements(), bias.num_elements(), stream),
                    "BiasAdd");
  }
};

}  // namespace

Status RegisterElementwiseKernels() {
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kAdd>>("Add", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kSub>>("Sub", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kMul>>("Mul", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kDiv>>("Div", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kMaximum>>("Maximum", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kMinimum>>("Minimum", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BiasAddKernel>("BiasAdd", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
