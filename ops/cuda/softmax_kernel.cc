// GPU kernels of Softmax and LogSoftmax over the last axis on cuDNN (the tensor seen as
// [rows, classes, 1, 1]; f32 and f64), numerically stable as the CPU's (max subtracted).
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cudnn_util.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

template <bool kLog>
class SoftmaxKernel : public OpKernel {
 public:
  explicit SoftmaxKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.shape().rank() < 1) return InvalidArgument("logits must have rank >= 1");
    ASSIGN_OR_RETURN(cudnnDataType_t type,
                     DnnFloatType(x.dtype(), kLog ? "LogSoftmax" : "Softmax"));
    ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
    const int64_t c = x.shape()[x.shape().rank() - 1];
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

}  // namespace

Status RegisterSoftmaxKernels() {
  RETURN_IF_ERROR(RegisterKernel<SoftmaxKernel<false>>("Softmax", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<SoftmaxKernel<true>>("LogSoftmax", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
