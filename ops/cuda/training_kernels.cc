// GPU kernels of the optimizers' updates: ApplyAdam, ApplyAdamW, ApplySGD and ApplyMomentum, with
// the CPU's checks (ops/common/training_kernels.h); the step counter and the learning rate stay
// on the device, and the work is queued on the device's stream.
#include "ops/common/training_kernels.h"

#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

// ApplyAdam and ApplyAdamW (weight_decay > 0): the step counter, learning rate and bias
// correction stay on the device.
class ApplyAdamKernel : public common::AdamBase<ApplyAdamKernel> {
 public:
  using AdamBase::AdamBase;
  Status Run(KernelContext& ctx, const Tensor& grad, const Tensor& lr,
             const common::AdamValues& cur, common::AdamTargets& dst) {
    ASSIGN_OR_RETURN(ElemType type, TypeOf(grad, /*floats_only=*/true));
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor scratch, ctx.AllocateTemp(2 * sizeof(double)));
    AdamArgs args{.grad = grad.raw_data(),
                  .w = cur.var.raw_data(),
                  .m = cur.m.raw_data(),
                  .v = cur.v.raw_data(),
                  .w_out = dst.var.raw_data(),
                  .m_out = dst.m.raw_data(),
                  .v_out = dst.v.raw_data(),
                  .lr = lr.raw_data(),
                  .step_in = cur.step.data<int64_t>(),
                  .step_out = dst.step.data<int64_t>(),
                  .scratch = static_cast<double*>(scratch.raw_data()),
                  .beta1 = a_.beta1,
                  .beta2 = a_.beta2,
                  .epsilon = a_.epsilon,
                  .weight_decay = a_.weight_decay};
    return Launched(LaunchAdam(type, args, grad.num_elements(), stream), "ApplyAdam");
  }
};

// ApplySGD (kMomentum false) and ApplyMomentum (with Nesterov): the learning rate stays on the
// device.
template <bool kMomentum>
class ApplyMomentumKernel : public common::MomentumBase<ApplyMomentumKernel<kMomentum>, kMomentum> {
  using Base = common::MomentumBase<ApplyMomentumKernel<kMomentum>, kMomentum>;

 public:
  using Base::Base;
  Status Run(KernelContext& ctx, const Tensor& grad, const Tensor& lr, const Tensor& var,
             const Tensor* accum, Tensor& var_dst, Tensor* accum_dst) {
    ASSIGN_OR_RETURN(ElemType type, TypeOf(grad, /*floats_only=*/true));
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    MomentumArgs args{.grad = grad.raw_data(),
                      .w = var.raw_data(),
                      .accum = accum != nullptr ? accum->raw_data() : nullptr,
                      .w_out = var_dst.raw_data(),
                      .accum_out = accum_dst != nullptr ? accum_dst->raw_data() : nullptr,
                      .lr = lr.raw_data(),
                      .momentum = this->momentum_,
                      .nesterov = this->nesterov_};
    return Launched(LaunchMomentum(type, args, grad.num_elements(), stream),
                    kMomentum ? "ApplyMomentum" : "ApplySGD");
  }
};

}  // namespace

Status RegisterTrainingKernels() {
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdam", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdamW", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<false>>("ApplySGD", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<true>>("ApplyMomentum", "GPU"));
  // The gated twins read their gate on the host (a one-byte copy that waits for the stream).
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdamIf", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdamWIf", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<false>>("ApplySGDIf", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<true>>("ApplyMomentumIf", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
