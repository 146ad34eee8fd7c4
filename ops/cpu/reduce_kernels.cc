// CPU kernels of ReduceSum and ReduceMean. Floats accumulate in double, integers in int64.
// Reducing over no elements gives 0 for a sum and NaN (0 for integers) for a mean.
#include <limits>
#include <vector>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"

namespace dflow::cpu {
namespace {

template <bool kMean>
class ReduceKernel : public OpKernel {
 public:
  explicit ReduceKernel(const KernelInit& init)
      : axes_(std::get<std::vector<int64_t>>(*init.node.FindAttr("axes"))),
        keep_dims_(std::get<bool>(*init.node.FindAttr("keep_dims"))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& in = x.shape();
    int rank = in.rank();
    std::vector<bool> reduced(rank, axes_.empty());
    for (int64_t a : axes_) {
      if (a < -rank || a >= rank) return InvalidArgument("axis {} is out of range for {}", a, in);
      reduced[a < 0 ? a + rank : a] = true;
    }
    std::vector<int64_t> out_dims;
    // Output strides seen from the input's index space: 0 on reduced dimensions.
    std::array<int64_t, Shape::kMaxRank> out_stride{};
    int64_t stride = 1, count = 1;
    for (int i = rank - 1; i >= 0; --i) {
      if (reduced[i]) {
        count *= in[i];
      } else {
        out_stride[i] = stride;
        stride *= in[i];
      }
    }
    for (int i = 0; i < rank; ++i) {
      if (!reduced[i]) {
        out_dims.push_back(in[i]);
      } else if (keep_dims_) {
        out_dims.push_back(1);
      }
    }
    Shape out_shape(out_dims);
    return DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
      ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), out_shape));
      std::vector<Acc> acc(out_shape.num_elements(), Acc(0));
      const T* px = x.data<T>();
      int64_t n = x.num_elements();
      std::array<int64_t, Shape::kMaxRank> idx{};
      int64_t o = 0;
      for (int64_t i = 0; i < n; ++i) {
        acc[o] += px[i];
        for (int d = rank - 1; d >= 0; --d) {
          o += out_stride[d];
          if (++idx[d] < in[d]) break;
          o -= out_stride[d] * in[d];
          idx[d] = 0;
        }
      }
      T* po = out->data<T>();
      for (size_t j = 0; j < acc.size(); ++j) {
        if (!kMean) {
          po[j] = static_cast<T>(acc[j]);
        } else if (count > 0) {
          po[j] = static_cast<T>(acc[j] / static_cast<Acc>(count));
        } else {  // the mean of nothing: NaN for floats (as NumPy), 0 for integers
          po[j] =
              std::numeric_limits<T>::has_quiet_NaN ? std::numeric_limits<T>::quiet_NaN() : T(0);
        }
      }
      return Status::OK();
    });
  }

 private:
  std::vector<int64_t> axes_;
  bool keep_dims_;
};

}  // namespace

Status RegisterReduceKernels() {
  RETURN_IF_ERROR(RegisterKernel<ReduceKernel<false>>("ReduceSum", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceKernel<true>>("ReduceMean", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
