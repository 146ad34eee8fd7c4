// GPU kernels of MaxPool, AvgPool and their gradients (NCHW, f32 and f64) on dflow's own
// kernels (pool.cu) rather than cuDNN's: cuDNN pads symmetrically and breaks max ties its own
// way, while these keep the CPU kernels' semantics for any pads: windows clipped to the input
// (padding never wins a max and is not counted in an average), the first maximum wins, output
// sizes rounded down. The gradients take (x, dy), as the CPU's do.
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

template <PoolKind kKind>
class PoolKernel : public OpKernel {
 public:
  explicit PoolKernel(const KernelInit& init)
      : k_(std::get<std::vector<int64_t>>(*init.node.FindAttr("ksize"))),
        s_(std::get<std::vector<int64_t>>(*init.node.FindAttr("strides"))),
        pads_(std::get<std::vector<int64_t>>(*init.node.FindAttr("pads"))) {}

  Status Compute(KernelContext& ctx) override {
    constexpr bool kGrad = kKind == PoolKind::kMaxGrad || kKind == PoolKind::kAvgGrad;
    const Tensor& x = ctx.input(0);
    const Shape& xs = x.shape();
    if (xs.rank() != 4) return InvalidArgument("input must be NCHW (rank 4), got {}", xs);
    PoolGeometry g{xs[0] * xs[1], xs[2], xs[3], OutSize(0, xs[2]), OutSize(1, xs[3]), k_[0],
                   k_[1],         s_[0], s_[1], pads_[0],          pads_[1]};
    const Shape ys{xs[0], xs[1], g.oh, g.ow};
    if (kGrad && (ctx.input(1).shape() != ys || ctx.input(1).dtype() != x.dtype())) {
      return InvalidArgument("output gradient {}{} does not match the pooling output {}{}",
                             ctx.input(1).dtype(), ctx.input(1).shape(), x.dtype(), ys);
    }
    auto type = ElemTypeOf(x.dtype());
    if (!type || (*type != ElemType::kF32 && *type != ElemType::kF64)) {
      return InvalidArgument("no GPU pooling for dtype {} (f32 or f64)", x.dtype());
    }
    ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), kGrad ? xs : ys));
    return Launched(
        LaunchPool(kKind, *type, x.raw_data(), kGrad ? ctx.input(1).raw_data() : nullptr,
                   out->raw_data(), g, stream),
        "pooling");
  }

 private:
  int64_t OutSize(int d, int64_t in) const {
    return std::max<int64_t>(0, (in + pads_[d] + pads_[d + 2] - k_[d]) / s_[d] + 1);
  }

  std::vector<int64_t> k_, s_, pads_;
};

}  // namespace

Status RegisterPoolKernels() {
  RETURN_IF_ERROR(RegisterKernel<PoolKernel<PoolKind::kMax>>("MaxPool", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<PoolKernel<PoolKind::kAvg>>("AvgPool", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<PoolKernel<PoolKind::kMaxGrad>>("MaxPoolGrad", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<PoolKernel<PoolKind::kAvgGrad>>("AvgPoolGrad", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
