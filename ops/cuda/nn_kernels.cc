// GPU kernels of the neural-network ops: Softmax and LogSoftmax over the last axis on cuDNN (the
// tensor seen as [rows, classes, 1, 1]; f32 and f64), numerically stable as the CPU's (max
// subtracted), and SparseSoftmaxCrossEntropyWithLogits, with the CPU's checks
// (ops/common/nn_kernels.h).
//
// Where the GPU differs: a label outside [0, classes) gives that row a NaN loss instead of an
// InvalidArgument (seeing it would make the host wait for the labels).
#include "ops/common/nn_kernels.h"

#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cudnn_util.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

template <bool kLog>
class SoftmaxKernel : public common::SoftmaxBase<SoftmaxKernel<kLog>> {
 public:
  using common::SoftmaxBase<SoftmaxKernel>::SoftmaxBase;
  Status Run(KernelContext& ctx, const Tensor& x, int64_t c) {
    ASSIGN_OR_RETURN(cudnnDataType_t type,
                     DnnFloatType(x.dtype(), kLog ? "LogSoftmax" : "Softmax"));
    ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
    if (c == 0 || x.num_elements() == 0) return Status::OK();
    ASSIGN_OR_RETURN(DnnCall call, DnnCall::Begin(ctx));
    TensorDesc d;
    RETURN_IF_ERROR(SetTensor4d(d, type, x.num_elements() / c, c, 1, 1));
    DnnScalars s(x.dtype());
    DFLOW_RETURN_IF_DNN(
        cudnnSoftmaxForward(call.handle(), kLog ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                            CUDNN_SOFTMAX_MODE_INSTANCE, s.one(), d.get(), x.raw_data(), s.zero(),
                            d.get(), out->raw_data()),
        kLog ? "log-softmax" : "softmax");
    return Status::OK();
  }
};

class SparseCrossEntropyKernel : public common::CrossEntropyBase<SparseCrossEntropyKernel> {
 public:
  using CrossEntropyBase::CrossEntropyBase;
  Status Run(KernelContext& ctx, const Tensor& logits, const Tensor& labels, int64_t n, int64_t c) {
    ASSIGN_OR_RETURN(ElemType type, TypeOf(logits, /*floats_only=*/true));
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * loss, ctx.AllocateOutput(0, logits.dtype(), Shape{n}));
    ASSIGN_OR_RETURN(Tensor * back, ctx.AllocateOutput(1, logits.dtype(), Shape{n, c}));
    return Launched(LaunchSparseSoftmaxXent(type, logits.raw_data(), labels.raw_data(),
                                            labels.dtype() == DType::kI64, loss->raw_data(),
                                            back->raw_data(), n, c, stream),
                    "softmax cross-entropy");
  }
};

}  // namespace

Status RegisterNnKernels() {
  RETURN_IF_ERROR(RegisterKernel<SoftmaxKernel<false>>("Softmax", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<SoftmaxKernel<true>>("LogSoftmax", "GPU"));
  RETURN_IF_ERROR(
      RegisterKernel<SparseCrossEntropyKernel>("SparseSoftmaxCrossEntropyWithLogits", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
