// GPU kernels of the unary ops: Relu and ReluGrad (f32, f64), and Cast between any two of f32,
// f64, f16, bf16, i32, i64, u8 and bool (rounding to nearest even), with the CPU's checks.
#include <optional>

#include "ops/common/elementwise_kernels.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

// What an activation kernel (and its gradient) needs: the float type of `like`, the stream and
// an output of like's dtype and shape.
struct ActivationLaunch {
  ElemType type;
  CudaStream stream;
  Tensor* out;
};
Result<ActivationLaunch> PrepareActivation(KernelContext& ctx, const Tensor& like) {
  auto type = ElemTypeOf(like.dtype());
  if (type != ElemType::kF32 && type != ElemType::kF64) {
    return InvalidArgument("no GPU kernel for dtype {}", like.dtype());
  }
  ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
  ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, like.dtype(), like.shape()));
  return ActivationLaunch{*type, stream, out};
}

class ReluKernel : public OpKernel {
 public:
  explicit ReluKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    ASSIGN_OR_RETURN(ActivationLaunch l, PrepareActivation(ctx, x));
    return Launched(LaunchRelu(l.type, x.raw_data(), l.out->raw_data(), x.num_elements(), l.stream),
                    "Relu");
  }
};

class ReluGradKernel : public common::ActivationGradBase<ReluGradKernel> {
 public:
  using ActivationGradBase::ActivationGradBase;
  Status Run(KernelContext& ctx, const Tensor& g, const Tensor& x) {
    ASSIGN_OR_RETURN(ActivationLaunch l, PrepareActivation(ctx, x));
    return Launched(LaunchReluGrad(l.type, g.raw_data(), x.raw_data(), l.out->raw_data(),
                                   x.num_elements(), l.stream),
                    "ReluGrad");
  }
};

std::optional<CastType> CastTypeOf(DType d) {
  switch (d) {
    case DType::kF32:
      return CastType::kF32;
    case DType::kF64:
      return CastType::kF64;
    case DType::kF16:
      return CastType::kF16;
    case DType::kBF16:
      return CastType::kBF16;
    case DType::kI32:
      return CastType::kI32;
    case DType::kI64:
      return CastType::kI64;
    case DType::kU8:
      return CastType::kU8;
    case DType::kBool:
      return CastType::kBool;
    default:
      return std::nullopt;
  }
}

// Cast between any two of f32, f64, f16, bf16, i32, i64, u8 and bool; the same dtype is the
// input itself.
class CastKernel : public common::CastBase<CastKernel> {
 public:
  using CastBase::CastBase;
  Status Run(KernelContext& ctx, const Tensor& x, DType dst) {
    auto from = CastTypeOf(x.dtype());
    auto to = CastTypeOf(dst);
    if (!from || !to) return InvalidArgument("no GPU Cast from {} to {}", x.dtype(), dst);
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dst, x.shape()));
    return Launched(LaunchCast(*from, *to, x.raw_data(), out->raw_data(), x.num_elements(), stream),
                    "Cast");
  }
};

}  // namespace

Status RegisterUnaryKernels() {
  RETURN_IF_ERROR(RegisterKernel<ReluKernel>("Relu", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ReluGradKernel>("ReluGrad", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<CastKernel>("Cast", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
