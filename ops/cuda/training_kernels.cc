// GPU kernels of what a classifier's training step needs beyond matrix products and
// element-wise ops: Fill, ZerosLike, OnesLike, BiasAdd, ReduceSum, ReduceMean, SumToShapeOf,
// ReduceGrad, SparseSoftmaxCrossEntropyWithLogits, ApplyAdam, ApplyAdamW, ApplySGD and
// ApplyMomentum. Shapes are
// checked on the host with the CPU kernels' rules and messages (ops/reduction.h,
// ops/common/variable_update.h); the work is queued on the device's stream.
//
// Where the GPU differs: a label outside [0, classes) gives that row a NaN loss instead of an
// InvalidArgument (seeing it would make the host wait for the labels).
#include "ops/common/variable_update.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"
#include "ops/reduction.h"

namespace dflow::cuda {
namespace {

using common::AdamOperands;
using common::CheckAdam;
using common::CheckGrad;
using common::CheckInitialized;
using common::LookupVariable;
using common::UpdateTarget;
using common::Value;
using common::VarRef;

Result<ElemType> TypeOf(const Tensor& t, bool floats_only = false) {
  auto type = ElemTypeOf(t.dtype());
  if (!type || (floats_only && *type != ElemType::kF32 && *type != ElemType::kF64)) {
    return InvalidArgument("no GPU kernel for dtype {}", t.dtype());
  }
  return *type;
}

Status CheckRank(const Shape& s) {
  if (s.rank() > kMaxRank) {
    return InvalidArgument("GPU reductions take rank {} at most, not {}", kMaxRank, s.rank());
  }
  return Status::OK();
}

// kFromInput < 0: Fill (attribute shape, dtype and value); else ZerosLike (0) or OnesLike (1).
template <int kFromInput>
class FillKernel : public OpKernel {
 public:
  explicit FillKernel(const KernelInit& init) {
    if constexpr (kFromInput < 0) {
      value_ = std::get<double>(*init.node.FindAttr("value"));
      shape_ = std::get<Shape>(*init.node.FindAttr("shape"));
      dtype_ = std::get<DType>(*init.node.FindAttr("dtype"));
    } else {
      value_ = kFromInput;
    }
  }
  Status Compute(KernelContext& ctx) override {
    const DType dtype = kFromInput < 0 ? dtype_ : ctx.input(0).dtype();
    const Shape& shape = kFromInput < 0 ? shape_ : ctx.input(0).shape();
    auto type = ElemTypeOf(dtype);
    if (!type) return InvalidArgument("no GPU kernel for dtype {}", dtype);
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dtype, shape));
    return Launched(LaunchFill(*type, out->raw_data(), out->num_elements(), value_, stream),
                    "a fill");
  }

 private:
  double value_ = 0;
  Shape shape_;
  DType dtype_ = DType::kInvalid;
};

class BiasAddKernel : public OpKernel {
 public:
  explicit BiasAddKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& bias = ctx.input(1);
    if (x.shape().rank() < 1 || bias.shape().rank() != 1 ||
        x.shape()[x.shape().rank() - 1] != bias.shape()[0] || x.dtype() != bias.dtype()) {
      return InvalidArgument("bias {}{} does not match the last dimension of input {}{}",
                             bias.dtype(), bias.shape(), x.dtype(), x.shape());
    }
    ASSIGN_OR_RETURN(ElemType type, TypeOf(x));
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), x.shape()));
    return Launched(LaunchBiasAdd(type, x.raw_data(), bias.raw_data(), out->raw_data(),
                                  x.num_elements(), bias.num_elements(), stream),
                    "BiasAdd");
  }
};

// The index map of reducing `in` over the dimensions marked in `reduced`.
ReduceIndex MakeReduceIndex(const Shape& in, const std::vector<bool>& reduced) {
  ReduceIndex index;
  int64_t stride = 1;
  std::vector<int64_t> strides(in.rank());
  for (int d = in.rank() - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= in[d];
  }
  for (int d = 0; d < in.rank(); ++d) {
    if (reduced[d]) {
      index.folded_dims[index.folded_rank] = in[d];
      index.folded_strides[index.folded_rank++] = strides[d];
      index.count *= in[d];
    } else {
      index.kept_dims[index.kept_rank] = in[d];
      index.kept_strides[index.kept_rank++] = strides[d];
      index.out_elements *= in[d];
    }
  }
  return index;
}

// Sums (or averages) `x` over `reduced` into output 0 of shape `out_shape`.
Status LaunchReduction(KernelContext& ctx, const Tensor& x, const std::vector<bool>& reduced,
                       const Shape& out_shape, ReduceMode mode) {
  RETURN_IF_ERROR(CheckRank(x.shape()));
  ASSIGN_OR_RETURN(ElemType type, TypeOf(x));
  ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
  ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), out_shape));
  return Launched(LaunchReduce(mode, type, x.raw_data(), out->raw_data(),
                               MakeReduceIndex(x.shape(), reduced), stream),
                  "a reduction");
}

template <ReduceMode kMode>
class ReduceKernel : public OpKernel {
 public:
  explicit ReduceKernel(const KernelInit& init)
      : axes_(std::get<std::vector<int64_t>>(*init.node.FindAttr("axes"))),
        keep_dims_(std::get<bool>(*init.node.FindAttr("keep_dims"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    ASSIGN_OR_RETURN(auto reduced, ReducedAxes(x.shape(), axes_));
    return LaunchReduction(ctx, x, reduced, ReducedShape(x.shape(), reduced, keep_dims_), kMode);
  }

 private:
  std::vector<int64_t> axes_;
  bool keep_dims_;
};

class SumToShapeOfKernel : public OpKernel {
 public:
  explicit SumToShapeOfKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& like = ctx.input(1).shape();
    if (x.shape() == like) {
      ctx.set_output(0, x);
      return Status::OK();
    }
    ASSIGN_OR_RETURN(auto reduced, SumToShapeAxes(x.shape(), like));
    return LaunchReduction(ctx, x, reduced, like, ReduceMode::kSum);
  }
};

class ReduceGradKernel : public OpKernel {
 public:
  explicit ReduceGradKernel(const KernelInit& init)
      : axes_(std::get<std::vector<int64_t>>(*init.node.FindAttr("axes"))),
        mean_(std::get<bool>(*init.node.FindAttr("mean"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& g = ctx.input(0);
    const Shape& in = ctx.input(1).shape();
    ASSIGN_OR_RETURN(auto reduced, ReducedAxes(in, axes_));
    RETURN_IF_ERROR(CheckRank(in));
    ReduceIndex r = MakeReduceIndex(in, reduced);
    if (g.num_elements() != r.out_elements) {
      return InvalidArgument("gradient {} does not match the reduction of {}", g.shape(), in);
    }
    SpreadIndex index;
    index.rank = in.rank();
    int64_t stride = 1;
    for (int d = in.rank() - 1; d >= 0; --d) {
      index.in_dims[d] = in[d];
      index.out_strides[d] = reduced[d] ? 0 : stride;
      if (!reduced[d]) stride *= in[d];
    }
    ASSIGN_OR_RETURN(ElemType type, TypeOf(g));
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, g.dtype(), in));
    const double scale = !mean_ ? 1.0 : r.count > 0 ? 1.0 / static_cast<double>(r.count) : 0.0;
    return Launched(LaunchSpread(type, g.raw_data(), out->raw_data(), out->num_elements(), index,
                                 scale, stream),
                    "ReduceGrad");
  }

 private:
  std::vector<int64_t> axes_;
  bool mean_;
};

class SparseCrossEntropyKernel : public OpKernel {
 public:
  explicit SparseCrossEntropyKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& logits = ctx.input(0);
    const Tensor& labels = ctx.input(1);
    if (logits.shape().rank() != 2 || labels.shape().rank() != 1 ||
        labels.shape()[0] != logits.shape()[0]) {
      return InvalidArgument("logits {} and labels {} do not match: expected [N,C] and [N]",
                             logits.shape(), labels.shape());
    }
    if (labels.dtype() != DType::kI32 && labels.dtype() != DType::kI64) {
      return InvalidArgument("labels are {}, not i32 or i64", labels.dtype());
    }
    const int64_t n = logits.shape()[0], c = logits.shape()[1];
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

// ApplyAdam and ApplyAdamW (weight_decay > 0): the step counter, learning rate and bias
// correction stay on the device.
class ApplyAdamKernel : public OpKernel {
 public:
  explicit ApplyAdamKernel(const KernelInit& init) : a_(init) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& lr = ctx.input(4);
    const Tensor& grad = ctx.input(5);
    MutexLocks lock(a_.var.var->mu, a_.m.var->mu, a_.v.var->mu, a_.step.var->mu);
    RETURN_IF_ERROR(CheckAdam(a_, grad, lr));
    ASSIGN_OR_RETURN(ElemType type, TypeOf(grad, /*floats_only=*/true));
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor scratch, ctx.AllocateTemp(2 * sizeof(double)));
    ASSIGN_OR_RETURN(Tensor var_dst, UpdateTarget(ctx, a_.var));
    ASSIGN_OR_RETURN(Tensor m_dst, UpdateTarget(ctx, a_.m));
    ASSIGN_OR_RETURN(Tensor v_dst, UpdateTarget(ctx, a_.v));
    ASSIGN_OR_RETURN(Tensor step_dst, UpdateTarget(ctx, a_.step));
    AdamArgs args{.grad = grad.raw_data(),
                  .w = Value(a_.var).raw_data(),
                  .m = Value(a_.m).raw_data(),
                  .v = Value(a_.v).raw_data(),
                  .w_out = var_dst.raw_data(),
                  .m_out = m_dst.raw_data(),
                  .v_out = v_dst.raw_data(),
                  .lr = lr.raw_data(),
                  .step_in = Value(a_.step).data<int64_t>(),
                  .step_out = step_dst.data<int64_t>(),
                  .scratch = static_cast<double*>(scratch.raw_data()),
                  .beta1 = a_.beta1,
                  .beta2 = a_.beta2,
                  .epsilon = a_.epsilon,
                  .weight_decay = a_.weight_decay};
    RETURN_IF_ERROR(Launched(LaunchAdam(type, args, grad.num_elements(), stream), "ApplyAdam"));
    Value(a_.var) = var_dst;
    Value(a_.m) = m_dst;
    Value(a_.v) = v_dst;
    Value(a_.step) = step_dst;
    ctx.set_output(0, Value(a_.var));
    return Status::OK();
  }

 private:
  AdamOperands a_;
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
  RETURN_IF_ERROR(RegisterKernel<FillKernel<-1>>("Fill", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<FillKernel<0>>("ZerosLike", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<FillKernel<1>>("OnesLike", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<BiasAddKernel>("BiasAdd", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceKernel<ReduceMode::kSum>>("ReduceSum", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceKernel<ReduceMode::kMean>>("ReduceMean", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<SumToShapeOfKernel>("SumToShapeOf", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceGradKernel>("ReduceGrad", "GPU"));
  RETURN_IF_ERROR(
      RegisterKernel<SparseCrossEntropyKernel>("SparseSoftmaxCrossEntropyWithLogits", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdam", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyAdamKernel>("ApplyAdamW", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<false>>("ApplySGD", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ApplyMomentumKernel<true>>("ApplyMomentum", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
