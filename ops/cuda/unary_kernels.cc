// GPU kernels of the unary ops: Neg, Exp, Log, Sqrt, Rsqrt, Square, Relu, LeakyRelu, Sigmoid,
// Tanh, Gelu, Abs, Sign, Floor, Ceil, Round, the trigonometric and hyperbolic functions and
// their inverses, Erf (f32, f64, i32, i64), the activation gradients, and Cast between any two of
// f32, f64, f16, bf16, i32, i64, u8 and bool (rounding to nearest even), with the CPU's checks.
#include <optional>

#include "ops/common/elementwise_kernels.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

// Runs kOp over every element of input 0 (f32, f64, i32, i64; in place where the input is
// not needed after). LeakyRelu reads its slope from the node's alpha.
template <UnaryOp kOp>
class UnaryKernel : public OpKernel {
 public:
  explicit UnaryKernel(const KernelInit& init) {
    if constexpr (kOp == UnaryOp::kLeakyRelu) {
      alpha_ = std::get<double>(*init.node.FindAttr("alpha"));
    }
  }
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    ASSIGN_OR_RETURN(ElemType type, TypeOf(x));
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
    return Launched(
        LaunchUnary(kOp, type, x.raw_data(), out->raw_data(), x.num_elements(), alpha_, stream),
        "a unary op");
  }

 private:
  double alpha_ = 0;
};

// ReluGrad, LeakyReluGrad, GeluGrad from g and the activation's input x (checked alike by the
// shared base).
template <GradOp kOp>
class ActivationGradKernel : public common::ActivationGradBase<ActivationGradKernel<kOp>> {
 public:
  explicit ActivationGradKernel(const KernelInit& init)
      : common::ActivationGradBase<ActivationGradKernel<kOp>>(init) {
    if constexpr (kOp == GradOp::kLeakyRelu) {
      alpha_ = std::get<double>(*init.node.FindAttr("alpha"));
    }
  }
  Status Run(KernelContext& ctx, const Tensor& g, const Tensor& x) {
    ASSIGN_OR_RETURN(ElemType type, TypeOf(x));
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, g.dtype(), g.shape()));
    return Launched(LaunchActivationGrad(kOp, type, g.raw_data(), x.raw_data(), out->raw_data(),
                                         x.num_elements(), alpha_, stream),
                    "an activation gradient");
  }

 private:
  double alpha_ = 0;
};

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
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kNeg>>("Neg", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kExp>>("Exp", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kLog>>("Log", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kSqrt>>("Sqrt", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kRsqrt>>("Rsqrt", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kSquare>>("Square", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kRelu>>("Relu", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kLeakyRelu>>("LeakyRelu", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kSigmoid>>("Sigmoid", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kTanh>>("Tanh", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kGelu>>("Gelu", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kAbs>>("Abs", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kSign>>("Sign", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kFloor>>("Floor", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kCeil>>("Ceil", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kRound>>("Round", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kSin>>("Sin", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kCos>>("Cos", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kTan>>("Tan", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kAsin>>("Asin", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kAcos>>("Acos", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kAtan>>("Atan", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kSinh>>("Sinh", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kCosh>>("Cosh", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kAsinh>>("Asinh", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kAcosh>>("Acosh", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kAtanh>>("Atanh", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<UnaryKernel<UnaryOp::kErf>>("Erf", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ActivationGradKernel<GradOp::kRelu>>("ReluGrad", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ActivationGradKernel<GradOp::kLeakyRelu>>("LeakyReluGrad", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ActivationGradKernel<GradOp::kGelu>>("GeluGrad", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<CastKernel>("Cast", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
