// GPU kernels of the element-wise ops: Add, Sub, Mul, Div, Maximum, Minimum, AddN (NumPy
// broadcasting up to rank 8, f32, f64, i32, i64; integer Div is refused, InvalidArgument: the
// CPU kernel's check for a zero divisor would need a copy to the host), Relu and ReluGrad (f32,
// f64). Each checks shapes on the host, allocates its output on the device and launches on the
// device's compute stream (ops/cuda/cuda_context.h), then returns without waiting.
#include <fmt/format.h>

#include <optional>

#include "framework/kernel.h"
#include "ops/broadcast.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"
#include "ops/cuda/launch.h"

namespace dflow::cuda {
namespace {

template <BinaryOp kOp>
class BinaryKernel : public OpKernel {
 public:
  explicit BinaryKernel(const KernelInit&) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    ASSIGN_OR_RETURN(Shape shape, BinaryOutputShape(a, b));
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

class ReluGradKernel : public OpKernel {
 public:
  explicit ReluGradKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& g = ctx.input(0);
    const Tensor& x = ctx.input(1);
    if (g.shape() != x.shape() || g.dtype() != x.dtype()) {
      return InvalidArgument("gradient {}{} differs from input {}{}", g.dtype(), g.shape(),
                             x.dtype(), x.shape());
    }
    ASSIGN_OR_RETURN(ActivationLaunch l, PrepareActivation(ctx, x));
    return Launched(LaunchReluGrad(l.type, g.raw_data(), x.raw_data(), l.out->raw_data(),
                                   x.num_elements(), l.stream),
                    "ReluGrad");
  }
};

// The sum of its inputs, all of one shape: the first two added, then each further one added in
// place (ForwardOrAllocateOutput may reuse input 0's buffer, which the in-order sums allow).
class AddNKernel : public OpKernel {
 public:
  explicit AddNKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& first = ctx.input(0);
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).shape() != first.shape() || ctx.input(i).dtype() != first.dtype()) {
        return InvalidArgument("input {} is {}{} but input 0 is {}{}", i, ctx.input(i).dtype(),
                               ctx.input(i).shape(), first.dtype(), first.shape());
      }
    }
    auto type = ElemTypeOf(first.dtype());
    if (!type) return InvalidArgument("no GPU kernel for dtype {}", first.dtype());
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, first.dtype(), first.shape()));
    const int64_t n = first.num_elements();
    if (ctx.num_inputs() == 1) {
      if (out->raw_data() == first.raw_data()) return Status::OK();
      return ctx.device_context()->CopyOnDevice(first, *out);
    }
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      const void* a = i == 1 ? first.raw_data() : out->raw_data();
      RETURN_IF_ERROR(Launched(LaunchBinary(BinaryOp::kAdd, *type, a, ctx.input(i).raw_data(),
                                            out->raw_data(), n, nullptr, stream),
                               "AddN"));
    }
    return Status::OK();
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
class CastKernel : public OpKernel {
 public:
  explicit CastKernel(const KernelInit& init)
      : dst_(std::get<DType>(*init.node.FindAttr("DstT"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == dst_) {
      ctx.set_output(0, x);
      return Status::OK();
    }
    auto from = CastTypeOf(x.dtype());
    auto to = CastTypeOf(dst_);
    if (!from || !to) return InvalidArgument("no GPU Cast from {} to {}", x.dtype(), dst_);
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dst_, x.shape()));
    return Launched(LaunchCast(*from, *to, x.raw_data(), out->raw_data(), x.num_elements(), stream),
                    "Cast");
  }

 private:
  DType dst_;
};

}  // namespace

Status RegisterElementwiseKernels() {
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kAdd>>("Add", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kSub>>("Sub", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kMul>>("Mul", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kDiv>>("Div", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kMaximum>>("Maximum", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kMinimum>>("Minimum", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ReluKernel>("Relu", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ReluGradKernel>("ReluGrad", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<AddNKernel>("AddN", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<CastKernel>("Cast", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
