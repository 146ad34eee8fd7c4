// GPU kernels of the array ops: Fill, ZerosLike, OnesLike (f32, f64, i32, i64, u8, bool) and
// AddN and ElementCount (f32, f64, i32, i64), with
// the CPU's checks (ops/common/array_kernels.h); the work is queued on the device's stream.
#include "ops/common/array_kernels.h"

#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

// kFromInput < 0: Fill (attribute shape, dtype and value); else ZerosLike (0) or OnesLike (1).
template <int kFromInput>
class FillKernel : public common::FillBase<FillKernel<kFromInput>, kFromInput> {
 public:
  using common::FillBase<FillKernel, kFromInput>::FillBase;
  Status Run(KernelContext& ctx, Tensor& out) {
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    if (out.dtype() == DType::kBool || out.dtype() == DType::kU8) {
      const double v = this->value();
      const auto byte = static_cast<unsigned char>(out.dtype() == DType::kBool ? v != 0 : v);
      return Launched(LaunchFillBytes(out.raw_data(), out.num_elements(), byte, stream), "a fill");
    }
    ASSIGN_OR_RETURN(ElemType type, TypeOf(out));
    return Launched(LaunchFill(type, out.raw_data(), out.num_elements(), this->value(), stream),
                    "a fill");
  }
};

// The count written into the scalar on the device's stream (one element: a fill).
class ElementCountKernel : public common::ElementCountBase<ElementCountKernel> {
 public:
  using ElementCountBase::ElementCountBase;
  Status Run(KernelContext& ctx, Tensor& out, int64_t count) {
    ASSIGN_OR_RETURN(ElemType type, TypeOf(out));
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    return Launched(LaunchFill(type, out.raw_data(), 1, static_cast<double>(count), stream),
                    "ElementCount");
  }
};

// The sum of its inputs, all of one shape: the first two added, then each further one added in
// place (ForwardOrAllocateOutput may reuse input 0's buffer, which the in-order sums allow).
class AddNKernel : public common::AddNBase<AddNKernel> {
 public:
  using AddNBase::AddNBase;
  Status Run(KernelContext& ctx, const Tensor& first) {
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

}  // namespace

Status RegisterArrayKernels() {
  RETURN_IF_ERROR(RegisterKernel<FillKernel<-1>>("Fill", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<FillKernel<0>>("ZerosLike", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<FillKernel<1>>("OnesLike", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<AddNKernel>("AddN", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ElementCountKernel>("ElementCount", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
