// GPU kernels of BatchNorm (training), BatchNormInference and BatchNormGrad over axis 1 of an
// [N, C, ...] tensor on cuDNN's spatial batch normalization (the tensor seen as [N, C, rest, 1]),
// f32 and f64, with the CPU kernels' contract:
// - BatchNorm's variance output is the biased batch variance. cuDNN gives the unbiased one as
//   its running variance (asked for with an averaging factor of 1), scaled here by
//   (count - 1) / count.
// - BatchNormGrad uses the mean and variance it is given (cuDNN's saved mean and inverse
//   standard deviation, computed from them), not statistics recomputed from x.
// cuDNN needs epsilon >= CUDNN_BN_MIN_EPSILON (1e-5); a smaller one is an InvalidArgument.
#include "ops/batch_norm_dims.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cudnn_util.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

using Dims = BatchNormDims;

// The descriptors of x (and y) and of the per-channel vectors.
struct BnDescs {
  TensorDesc x, vec;
  Status Create(const Dims& d, cudnnDataType_t type) {
    RETURN_IF_ERROR(SetTensor4d(x, type, d.n, d.c, d.inner, 1));
    RETURN_IF_ERROR(vec.Create());
    DFLOW_RETURN_IF_DNN(cudnnDeriveBNTensorDescriptor(vec.get(), x.get(), kMode),
                        "describing the batch norm's vectors");
    return Status::OK();
  }
};

class BatchNormBase : public OpKernel {
 public:
  explicit BatchNormBase(const KernelInit& init)
      : eps_(std::get<double>(*init.node.FindAttr("epsilon"))) {}

 protected:
  Status CheckEpsilon() const {
    if (eps_ < CUDNN_BN_MIN_EPSILON) {
      return InvalidArgument("epsilon {} is below cuDNN's minimum {}", eps_, CUDNN_BN_MIN_EPSILON);
    }
    return Status::OK();
  }
  double eps_;
};

class BatchNormKernel : public BatchNormBase {
 public:
  using BatchNormBase::BatchNormBase;

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    ASSIGN_OR_RETURN(Dims d, BatchNormDimsOf(x.shape()));
    const DType t = x.dtype();
    RETURN_IF_ERROR(CheckChannelVector(ctx.input(1), "scale", d.c, t));
    RETURN_IF_ERROR(CheckChannelVector(ctx.input(2), "offset", d.c, t));
    ASSIGN_OR_RETURN(cudnnDataType_t type, DnnFloatType(t, "BatchNorm"));
    RETURN_IF_ERROR(CheckEpsilon());
    ASSIGN_OR_RETURN(Tensor * y, ctx.AllocateOutput(0, t, x.shape()));
    ASSIGN_OR_RETURN(Tensor * mean, ctx.AllocateOutput(1, t, Shape{d.c}));
    ASSIGN_OR_RETURN(Tensor * var, ctx.AllocateOutput(2, t, Shape{d.c}));
    ASSIGN_OR_RETURN(DnnCall call, DnnCall::Begin(ctx));
    const ElemType et = *ElemTypeOf(t);
    // Statistics of nothing: NaN, as the CPU's mean of nothing.
    if (d.count() == 0) {
      RETURN_IF_ERROR(
          Launched(LaunchFill(et, mean->raw_data(), d.c, NAN, call.stream()), "a fill"));
      return Launched(LaunchFill(et, var->raw_data(), d.c, NAN, call.stream()), "a fill");
    }
    // The outputs are cuDNN's running averages with factor 1: start them at 0 so that no NaN
    // left in fresh memory survives 0 * old.
    RETURN_IF_ERROR(Launched(LaunchFill(et, mean->raw_data(), d.c, 0.0, call.stream()), "a fill"));
    RETURN_IF_ERROR(Launched(LaunchFill(et, var->raw_data(), d.c, 0.0, call.stream()), "a fill"));
    BnDescs desc;
    RETURN_IF_ERROR(desc.Create(d, type));
    DnnScalars s(t);
    DFLOW_RETURN_IF_DNN(
        cudnnBatchNormalizationForwardTraining(
            call.handle(), kMode, s.one(), s.zero(), desc.x.get(), x.raw_data(), desc.x.get(),
            y->raw_data(), desc.vec.get(), ctx.input(1).raw_data(), ctx.input(2).raw_data(), 1.0,
            mean->raw_data(), var->raw_data(), eps_, nullptr, nullptr),
        "batch normalization");
    if (d.count() == 1) {  // one element per channel: variance 0 (cuDNN's unbiased one is not)
      return Launched(LaunchFill(et, var->raw_data(), d.c, 0.0, call.stream()), "a fill");
    }
    const double unbias = static_cast<double>(d.count() - 1) / static_cast<double>(d.count());
    const float unbias32 = static_cast<float>(unbias);
    DFLOW_RETURN_IF_DNN(
        cudnnScaleTensor(call.handle(), desc.vec.get(), var->raw_data(),
                         t == DType::kF64 ? static_cast<const void*>(&unbias) : &unbias32),
        "scaling the variance");
    return Status::OK();
  }
};

class BatchNormInferenceKernel : public BatchNormBase {
 public:
  using BatchNormBase::BatchNormBase;

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    ASSIGN_OR_RETURN(Dims d, BatchNormDimsOf(x.shape()));
    const DType t = x.dtype();
    const char* names[] = {"scale", "offset", "mean", "variance"};
    for (int i = 1; i <= 4; ++i)
      RETURN_IF_ERROR(CheckChannelVector(ctx.input(i), names[i - 1], d.c, t));
    ASSIGN_OR_RETURN(cudnnDataType_t type, DnnFloatType(t, "BatchNormInference"));
    RETURN_IF_ERROR(CheckEpsilon());
    ASSIGN_OR_RETURN(Tensor * y, ctx.AllocateOutput(0, t, x.shape()));
    if (x.num_elements() == 0) return Status::OK();
    ASSIGN_OR_RETURN(DnnCall call, DnnCall::Begin(ctx));
    BnDescs desc;
    RETURN_IF_ERROR(desc.Create(d, type));
    DnnScalars s(t);
    DFLOW_RETURN_IF_DNN(
        cudnnBatchNormalizationForwardInference(
            call.handle(), kMode, s.one(), s.zero(), desc.x.get(), x.raw_data(), desc.x.get(),
            y->raw_data(), desc.vec.get(), ctx.input(1).raw_data(), ctx.input(2).raw_data(),
            ctx.input(3).raw_data(), ctx.input(4).raw_data(), eps_),
        "batch normalization (inference)");
    return Status::OK();
  }
};

class BatchNormGradKernel : public BatchNormBase {
 public:
  using BatchNormBase::BatchNormBase;

  Status Compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    ASSIGN_OR_RETURN(Dims d, BatchNormDimsOf(x.shape()));
    if (dy.shape() != x.shape() || dy.dtype() != x.dtype()) {
      return InvalidArgument("output gradient {}{} does not match the input {}{}", dy.dtype(),
                             dy.shape(), x.dtype(), x.shape());
    }
    const DType t = x.dtype();
    const char* names[] = {"scale", "mean", "variance"};
    for (int i = 2; i <= 4; ++i)
      RETURN_IF_ERROR(CheckChannelVector(ctx.input(i), names[i - 2], d.c, t));
    ASSIGN_OR_RETURN(cudnnDataType_t type, DnnFloatType(t, "BatchNormGrad"));
    RETURN_IF_ERROR(CheckEpsilon());
    ASSIGN_OR_RETURN(Tensor * dx, ctx.AllocateOutput(0, t, x.shape()));
    ASSIGN_OR_RETURN(Tensor * dscale, ctx.AllocateOutput(1, t, Shape{d.c}));
    ASSIGN_OR_RETURN(Tensor * doffset, ctx.AllocateOutput(2, t, Shape{d.c}));
    ASSIGN_OR_RETURN(DnnCall call, DnnCall::Begin(ctx));
    const ElemType et = *ElemTypeOf(t);
    if (d.count() == 0) {
      RETURN_IF_ERROR(
          Launched(LaunchFill(et, dscale->raw_data(), d.c, 0.0, call.stream()), "a fill"));
      return Launched(LaunchFill(et, doffset->raw_data(), d.c, 0.0, call.stream()), "a fill");
    }
    ASSIGN_OR_RETURN(Tensor inv_std, ctx.AllocateTemp(d.c * DTypeSize(t)));
    RETURN_IF_ERROR(Launched(
        LaunchInvStd(et, ctx.input(4).raw_data(), inv_std.raw_data(), d.c, eps_, call.stream()),
        "the inverse standard deviation"));
    BnDescs desc;
    RETURN_IF_ERROR(desc.Create(d, type));
    DnnScalars s(t);
    DFLOW_RETURN_IF_DNN(
        cudnnBatchNormalizationBackward(
            call.handle(), kMode, s.one(), s.zero(), s.one(), s.zero(), desc.x.get(), x.raw_data(),
            desc.x.get(), dy.raw_data(), desc.x.get(), dx->raw_data(), desc.vec.get(),
            ctx.input(2).raw_data(), dscale->raw_data(), doffset->raw_data(), eps_,
            ctx.input(3).raw_data(), inv_std.raw_data()),
        "batch normalization's gradient");
    return Status::OK();
  }
};

}  // namespace

Status RegisterBatchNormKernels() {
  RETURN_IF_ERROR(RegisterKernel<BatchNormKernel>("BatchNorm", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BatchNormInferenceKernel>("BatchNormInference", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BatchNormGradKernel>("BatchNormGrad", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
