// GPU kernels of the reductions: ReduceSum, ReduceMean and ReduceMax (over any axes, up to rank 8),
// SumToShapeOf and ReduceGrad, with the CPU's shape rules and messages (ops/common/
// reduce_kernels.h); the work is queued on the device's stream.
#include "ops/common/reduce_kernels.h"

#include <vector>

#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

Status CheckRank(const Shape& s) {
  if (s.rank() > kMaxRank) {
    return InvalidArgument("GPU reductions take rank {} at most, not {}", kMaxRank, s.rank());
  }
  return Status::OK();
}

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

// Sums, averages or takes the maximum of `x` over `reduced` into output 0 of shape `out_shape`
// (the maximum of nothing is InvalidArgument, as on the CPU).
Status LaunchReduction(KernelContext& ctx, const Tensor& x, const std::vector<bool>& reduced,
                       const Shape& out_shape, ReduceMode mode) {
  RETURN_IF_ERROR(CheckRank(x.shape()));
  const ReduceIndex index = MakeReduceIndex(x.shape(), reduced);
  if (mode == ReduceMode::kMax && index.count == 0) {
    return InvalidArgument("ReduceMax over no elements of {}", x.shape());
  }
  ASSIGN_OR_RETURN(ElemType type, TypeOf(x));
  ASSIGN_OR_RETURN(CudaStream stream, StreamOf(ctx));
  ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), out_shape));
  return Launched(LaunchReduce(mode, type, x.raw_data(), out->raw_data(), index, stream),
                  "a reduction");
}

template <ReduceMode kMode>
class ReduceKernel : public common::ReduceBase<ReduceKernel<kMode>> {
 public:
  using common::ReduceBase<ReduceKernel>::ReduceBase;
  Status Run(KernelContext& ctx, const Tensor& x, const std::vector<bool>& reduced,
             const Shape& out) {
    return LaunchReduction(ctx, x, reduced, out, kMode);
  }
};

class SumToShapeOfKernel : public common::SumToShapeOfBase<SumToShapeOfKernel> {
 public:
  using SumToShapeOfBase::SumToShapeOfBase;
  Status Run(KernelContext& ctx, const Tensor& x, const std::vector<bool>& reduced,
             const Shape& like) {
    return LaunchReduction(ctx, x, reduced, like, ReduceMode::kSum);
  }
};

class ReduceGradKernel : public common::ReduceGradBase<ReduceGradKernel> {
 public:
  using ReduceGradBase::ReduceGradBase;
  Status Run(KernelContext& ctx, const Tensor& g, const Shape& in, const std::vector<bool>& reduced,
             bool mean) {
    RETURN_IF_ERROR(CheckRank(in));
    ReduceIndex r = MakeReduceIndex(in, reduced);
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
    const double scale = !mean ? 1.0 : r.count > 0 ? 1.0 / static_cast<double>(r.count) : 0.0;
    return Launched(LaunchSpread(type, g.raw_data(), out->raw_data(), out->num_elements(), index,
                                 scale, stream),
                    "ReduceGrad");
  }
};

}  // namespace

Status RegisterReduceKernels() {
  RETURN_IF_ERROR(RegisterKernel<ReduceKernel<ReduceMode::kSum>>("ReduceSum", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceKernel<ReduceMode::kMean>>("ReduceMean", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceKernel<ReduceMode::kMax>>("ReduceMax", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<SumToShapeOfKernel>("SumToShapeOf", "GPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceGradKernel>("ReduceGrad", "GPU"));
  return Status::OK();
}

}  // namespace dflow::cuda
