// GPU kernels of the optimizers' updates: ApplyAdam, ApplyAdamW, ApplySGD and ApplyMomentum, with
// the CPU's checks (ops/common/variable_update.h); the step counter and the learning rate stay
// on the device, and the work is queued on the device's stream.
#include "ops/common/training_kernels.h"

#include "ops/common/variable_update.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

using common::CheckGrad;
using common::CheckInitialized;
using common::LookupVariable;
using common::UpdateTarget;
using common::Value;
using common::VarRef;

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
class ApplyMomentumKernel : public OpKernel {
 public:
  explicit ApplyMomentumKernel(const KernelInit& init) : var_(LookupVariable(init, 0)) {
    if constexpr (kMomentum) {
      accum_ = LookupVariable(init, 1);
      momentum_ = std::get<double>(*init.node.FindAttr("momentum"));
      nesterov_ = std::get<bool>(*init.node.FindAttr("nesterov"));
    }
  }

  Status Compute(KernelContext& ctx) override {
    if constexpr (kMomentum) {
      MutexLocks lock(var_.var->mu, accum_.var->mu);
      return Update(ctx);
    } else {
      MutexLock lock(var_.var->mu);
      return Update(ctx);
    }
  }

 private:
  // REQUIRES: the variables' mutexes held.
  Status Update(KernelContext& ctx) {
    const Tensor& lr = ctx.input(kMomentum ? 2 : 1);
    const Tensor& grad = ctx.input(kMomentum ? 3 : 2);
    RETURN_IF_ERROR(CheckInitialized(var_));
    RETURN_IF_ERROR(CheckGrad(var_, grad, lr));
    if (kMomentum) {
      RETURN_IF_ERROR(CheckInitialized(accum_));
      RETURN_IF_ERROR(CheckGrad(accum_, grad, lr));
    }
    ASSIGN_OR_RETURN(ElemType type, TypeOf(grad, /*floats_only=*/true));
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor var_dst, UpdateTarget(ctx, var_));
    Tensor acc_dst;
    if (kMomentum) {
      ASSIGN_OR_RETURN(acc_dst, UpdateTarget(ctx, accum_));
    }
    MomentumArgs args{.grad = grad.raw_data(),
                      .w = Value(var_).raw_data(),
                      .accum = kMomentum ? Value(accum_).raw_data() : nullptr,
                      .w_out = var_dst.raw_data(),
                      .accum_out = kMomentum ? acc_dst.raw_data() : nullptr,
                      .lr = lr.raw_data(),
                      .momentum = momentum_,
                      .nesterov = nesterov_};
    RETURN_IF_ERROR(Launched(LaunchMomentum(type, args, grad.num_elements(), stream),
                             kMomentum ? "ApplyMomentum" : "ApplySGD"));
    Value(var_) = var_dst;
    if (kMomentum) Value(accum_) = acc_dst;
    ctx.set_output(0, Value(var_));
    return Status::OK();
  }

  VarRef var_, accum_;
  double momentum_ = 0;
  bool nesterov_ = false;
};

}  // namespace

Status RegisterTrainingKernels() {
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdam", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdamW", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<false>>("ApplySGD", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<true>>("ApplyMomentum", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
