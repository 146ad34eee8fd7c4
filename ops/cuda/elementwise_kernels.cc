// GPU kernels of the element-wise binary ops: Add, Sub, Mul, Div, Maximum, Minimum, Pow, the
// comparisons (NumPy broadcasting up to rank 8, f32, f64, i32, i64; integer Div checks for a
// zero divisor as the CPU's does, reading a count back from the GPU), Select and BiasAdd. Each
// checks shapes on the host as the CPU's do (ops/common/elementwise_kernels.h), allocates its
// output on the device and launches on the device's compute stream (ops/cuda/cuda_context.h), then
// returns without waiting.
#include "ops/common/elementwise_kernels.h"

#include <cstring>

#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

// What a binary kernel launches with: a's launch type, the stream, the broadcast index (null
// when a and b have the output's shape) and the output, allocated as `out_dtype`.
struct BinaryLaunch {
  ElemType type;
  CudaStream stream;
  BroadcastIndex index;
  bool broadcast;
  Tensor* out;
  const BroadcastIndex* index_or_null() const { return broadcast ? &index : nullptr; }
};
Result<BinaryLaunch> PrepareBinary(KernelContext& ctx, const Tensor& a, const Tensor& b,
                                   const Shape& shape, DType out_dtype) {
  if (shape.rank() > kMaxRank) {
    return InvalidArgument("GPU element-wise ops take rank {} at most, not {}", kMaxRank,
                           shape.rank());
  }
  BinaryLaunch l{};
  ASSIGN_OR_RETURN(l.type, TypeOf(a));
  ASSIGN_OR_RETURN(l.stream, StreamOf(ctx));
  l.broadcast = a.shape() != b.shape();
  if (l.broadcast) {
    l.index.rank = shape.rank();
    for (int d = 0; d < shape.rank(); ++d) l.index.out_dims[d] = shape[d];
    BroadcastStrides(a.shape(), shape, l.index.a_strides);
    BroadcastStrides(b.shape(), shape, l.index.b_strides);
  }
  ASSIGN_OR_RETURN(l.out, ctx.AllocateOutput(0, out_dtype, shape));
  return l;
}

// Integer Div's check, as the CPU's: InvalidArgument when a divisor is zero. The count is made
// on the device and read back, so this op waits for the GPU (integer division is rare).
Status CheckNoZeroDivisor(KernelContext& ctx, const Tensor& b, ElemType type, CudaStream stream) {
  ASSIGN_OR_RETURN(Tensor count, ctx.AllocateTemp(sizeof(unsigned int)));
  RETURN_IF_ERROR(Launched(LaunchCountZeros(type, b.raw_data(), b.num_elements(),
                                            static_cast<unsigned int*>(count.raw_data()), stream),
                           "Div's zero check"));
  ASSIGN_OR_RETURN(Tensor host, ctx.device_context()->CopyToHost(count));
  unsigned int zeros = 0;
  std::memcpy(&zeros, host.raw_data(), sizeof(zeros));
  if (zeros > 0) return InvalidArgument("integer division by zero");
  return Status::OK();
}

template <BinaryOp kOp>
class BinaryKernel : public common::BinaryBase<BinaryKernel<kOp>> {
 public:
  using common::BinaryBase<BinaryKernel>::BinaryBase;
  Status Run(KernelContext& ctx, const Tensor& a, const Tensor& b, const Shape& shape) {
    ASSIGN_OR_RETURN(ElemType type, TypeOf(a));
    if (kOp == BinaryOp::kDiv && type != ElemType::kF32 && type != ElemType::kF64) {
      ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
      RETURN_IF_ERROR(CheckNoZeroDivisor(ctx, b, type, stream));
    }
    ASSIGN_OR_RETURN(BinaryLaunch l, PrepareBinary(ctx, a, b, shape, a.dtype()));
    return Launched(LaunchBinary(kOp, l.type, a.raw_data(), b.raw_data(), l.out->raw_data(),
                                 shape.num_elements(), l.index_or_null(), l.stream),
                    "an element-wise op");
  }
};

// Equal, NotEqual, Less, LessEqual, Greater, GreaterEqual: a bool output.
template <CompareOp kOp>
class CompareKernel : public common::BinaryBase<CompareKernel<kOp>> {
 public:
  using common::BinaryBase<CompareKernel>::BinaryBase;
  Status Run(KernelContext& ctx, const Tensor& a, const Tensor& b, const Shape& shape) {
    ASSIGN_OR_RETURN(BinaryLaunch l, PrepareBinary(ctx, a, b, shape, DType::kBool));
    return Launched(LaunchCompare(kOp, l.type, a.raw_data(), b.raw_data(),
                                  static_cast<bool*>(l.out->raw_data()), shape.num_elements(),
                                  l.index_or_null(), l.stream),
                    "a comparison");
  }
};

// Select(c, a, b): a where c, else b, the three broadcast together; any dtype of 1, 2, 4 or 8
// bytes.
class SelectKernel : public common::SelectBase<SelectKernel> {
 public:
  using SelectBase::SelectBase;
  Status Run(KernelContext& ctx, const Tensor& c, const Tensor& a, const Tensor& b,
             const Shape& shape) {
    if (shape.rank() > kMaxRank) {
      return InvalidArgument("GPU Select takes rank {} at most, not {}", kMaxRank, shape.rank());
    }
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, a.dtype(), shape));
    const bool broadcast = c.shape() != shape || a.shape() != shape || b.shape() != shape;
    SelectIndex index;
    if (broadcast) {
      index.rank = shape.rank();
      for (int d = 0; d < shape.rank(); ++d) index.out_dims[d] = shape[d];
      BroadcastStrides(c.shape(), shape, index.c_strides);
      BroadcastStrides(a.shape(), shape, index.a_strides);
      BroadcastStrides(b.shape(), shape, index.b_strides);
    }
    const int bytes = static_cast<int>(DTypeSize(a.dtype()));
    return Launched(
        LaunchSelect(bytes, static_cast<const bool*>(c.raw_data()), a.raw_data(), b.raw_data(),
                     out->raw_data(), shape.num_elements(), broadcast ? &index : nullptr, stream),
        "Select");
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
  RETURN_IF_ERROR(RegisterKernel<BinaryKernel<BinaryOp::kPow>>("Pow", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<CompareKernel<CompareOp::kEq>>("Equal", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<CompareKernel<CompareOp::kNe>>("NotEqual", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<CompareKernel<CompareOp::kLt>>("Less", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<CompareKernel<CompareOp::kLe>>("LessEqual", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<CompareKernel<CompareOp::kGt>>("Greater", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<CompareKernel<CompareOp::kGe>>("GreaterEqual", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<SelectKernel>("Select", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BiasAddKernel>("BiasAdd", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
