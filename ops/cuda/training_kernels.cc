// GPU kernels of the optimizers' updates (ApplyAdam, ApplyAdamW, ApplySGD and ApplyMomentum and
// their gated twins) with the CPU's checks (ops/common/training_kernels.h), and AllFinite, their
// gate's check. The step counter, the learning rate and the gate stay on the device, and the
// work is queued on the device's stream.
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
  static constexpr bool kReadsGateOnDevice = true;
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
                  .weight_decay = a_.weight_decay,
                  .apply = gate_.DeviceGate(ctx)};
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
  static constexpr bool kReadsGateOnDevice = true;
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
                      .nesterov = this->nesterov_,
                      .apply = this->gate_.DeviceGate(ctx)};
    return Launched(LaunchMomentum(type, args, grad.num_elements(), stream),
                    kMomentum ? "ApplyMomentum" : "ApplySGD");
  }
};

// AllFinite (dynamic loss scaling's check, rewrite/mixed_precision.h): the flag is set true,
// then each input's check clears it on the device; the host never waits.
class AllFiniteKernel : public OpKernel {
 public:
  explicit AllFiniteKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, DType::kBool, Shape{}));
    bool* finite = out->data<bool>();
    RETURN_IF_ERROR(Launched(LaunchFillBytes(finite, 1, 1, stream), "AllFinite"));
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& x = ctx.input(i);
      const std::optional<CastType> type = CastTypeOf(x.dtype());
      if (type != CastType::kF32 && type != CastType::kF64 && type != CastType::kF16 &&
          type != CastType::kBF16) {
        return InvalidArgument("AllFinite: input {} is {}, not a floating-point type", i,
                               x.dtype());
      }
      RETURN_IF_ERROR(
          Launched(LaunchClearIfNotFinite(*type, x.raw_data(), x.num_elements(), finite, stream),
                   "AllFinite"));
    }
    return Status::OK();
  }
};

}  // namespace

Status RegisterTrainingKernels() {
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdam", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdamW", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<false>>("ApplySGD", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<true>>("ApplyMomentum", "GPU"));
  // The gated twins read their gate on the device: the host never waits for it.
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdamIf", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdamWIf", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<false>>("ApplySGDIf", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<true>>("ApplyMomentumIf", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<AllFiniteKernel>("AllFinite", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
