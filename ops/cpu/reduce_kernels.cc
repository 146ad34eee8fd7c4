// CPU kernels of the reductions and their gradient helpers: ReduceSum, ReduceMean, SumToShapeOf
// (undo broadcasting) and ReduceGrad (spread a reduced gradient back). Floats accumulate in
// double, integers in int64. Reducing over no elements gives 0 for a sum and NaN (0 for
// integers) for a mean.
#include "ops/common/reduce_kernels.h"

#include <limits>
#include <span>
#include <vector>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/nan_aware.h"
#include "ops/reduction.h"

namespace dflow::cpu {
namespace {

// Maps each element of a tensor of shape `in` to the element of the reduced tensor it
// contributes to, where `reduced[d]` says whether dimension d is reduced.
struct Reduction {
  Shape in;
  std::vector<bool> reduced;
  std::array<int64_t, Shape::kMaxRank> out_stride{};  // 0 on reduced dimensions
  int64_t out_elements = 1;
  int64_t count = 1;  // input elements per output element

  Reduction(const Shape& shape, const std::vector<bool>& r) {
    // Dimensions of 1 drop out and neighbours both reduced or both kept act as one (the
    // row-major order is the same), so a mean over [H, W] runs along rows of H * W elements.
    std::vector<int64_t> dims;
    for (int i = 0; i < shape.rank(); ++i) {
      if (shape[i] == 1) continue;
      if (!dims.empty() && reduced.back() == r[i]) {
        dims.back() *= shape[i];
      } else {
        dims.push_back(shape[i]);
        reduced.push_back(r[i]);
      }
    }
    in = Shape(std::span<const int64_t>(dims));
    for (int i = in.rank() - 1; i >= 0; --i) {
      if (reduced[i]) {
        count *= in[i];
      } else {
        out_stride[i] = out_elements;
        out_elements *= in[i];
      }
    }
  }

  // Calls f(input_index, output_index) for every input element in order.
  template <typename F>
  void ForEach(F&& f) const {
    ForEachRow([&](int64_t i, int64_t o, int64_t len, int64_t o_step) {
      for (int64_t k = 0; k < len; ++k) f(i + k, o + k * o_step);
    });
  }

  // Calls f(input_begin, output_begin, length, output_step) for each run along the last
  // dimension: input elements [begin, begin + length) go to outputs begin + k * step (step 0
  // when the last dimension is reduced). Tight inner loops let the compiler vectorise.
  template <typename F>
  void ForEachRow(F&& f) const {
    int rank = in.rank();
    int64_t n = in.num_elements();
    if (n == 0) return;
    if (rank == 0) {
      f(int64_t{0}, int64_t{0}, int64_t{1}, int64_t{0});
      return;
    }
    int64_t len = in[rank - 1], step = out_stride[rank - 1];
    std::array<int64_t, Shape::kMaxRank> idx{};
    int64_t o = 0;
    for (int64_t i = 0; i < n; i += len) {
      f(i, o, len, step);
      for (int d = rank - 2; d >= 0; --d) {
        o += out_stride[d];
        if (++idx[d] < in[d]) break;
        o -= out_stride[d] * in[d];
        idx[d] = 0;
      }
    }
  }
};

// acc[o] += every input element mapped to output o (acc has r.out_elements entries).
template <typename T, typename Acc>
void SumInto(const Reduction& r, const T* px, Acc* acc) {
  r.ForEachRow([&](int64_t i, int64_t o, int64_t len, int64_t step) {
    if (step == 0) {
      // Four partial sums: one chain of dependent additions ran at a quarter of the speed.
      Acc s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      const T* row = px + i;
      int64_t k = 0;
      for (; k + 4 <= len; k += 4) {
        s0 += row[k];
        s1 += row[k + 1];
        s2 += row[k + 2];
        s3 += row[k + 3];
      }
      for (; k < len; ++k) s0 += row[k];
      acc[o] += (s0 + s1) + (s2 + s3);
    } else {
      for (int64_t k = 0; k < len; ++k) acc[o + k * step] += px[i + k];
    }
  });
}

enum class Mode { kSum, kMean, kMax, kProd };

template <Mode kMode>
class ReduceKernel : public common::ReduceBase<ReduceKernel<kMode>> {
 public:
  using common::ReduceBase<ReduceKernel>::ReduceBase;
  Status Run(KernelContext& ctx, const Tensor& x, const std::vector<bool>& reduced,
             const Shape& out_shape) {
    Reduction r(x.shape(), reduced);
    return DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), out_shape));
      const T* px = x.data<T>();
      if constexpr (kMode == Mode::kMax) {
        if (r.count == 0) return InvalidArgument("ReduceMax over no elements of {}", x.shape());
        T* po = out->data<T>();
        // -inf for floats: the maximum of infinities below zero is -inf, not the lowest finite.
        const T start = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                             : std::numeric_limits<T>::lowest();
        std::fill(po, po + r.out_elements, start);
        r.ForEachRow([&](int64_t i, int64_t o, int64_t len, int64_t step) {
          for (int64_t k = 0; k < len; ++k) po[o + k * step] = NanMax(po[o + k * step], px[i + k]);
        });
        return Status::OK();
      }
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
      if constexpr (kMode == Mode::kProd) {  // the product of nothing is 1
        std::vector<Acc> acc(r.out_elements, Acc(1));
        r.ForEachRow([&](int64_t i, int64_t o, int64_t len, int64_t step) {
          for (int64_t k = 0; k < len; ++k) acc[o + k * step] *= px[i + k];
        });
        T* po = out->data<T>();
        for (size_t j = 0; j < acc.size(); ++j) po[j] = static_cast<T>(acc[j]);
        return Status::OK();
      }
      std::vector<Acc> acc(r.out_elements, Acc(0));
      SumInto(r, px, acc.data());
      T* po = out->data<T>();
      for (size_t j = 0; j < acc.size(); ++j) {
        if (kMode == Mode::kSum) {
          po[j] = static_cast<T>(acc[j]);
        } else if (r.count > 0) {
          po[j] = static_cast<T>(acc[j] / static_cast<Acc>(r.count));
        } else {  // the mean of nothing: NaN for floats (as NumPy), 0 for integers
          po[j] =
              std::numeric_limits<T>::has_quiet_NaN ? std::numeric_limits<T>::quiet_NaN() : T(0);
        }
      }
      return Status::OK();
    });
  }
};

// x [out shape of a broadcast] summed down to like's shape.
class SumToShapeOfKernel : public common::SumToShapeOfBase<SumToShapeOfKernel> {
 public:
  using SumToShapeOfBase::SumToShapeOfBase;
  Status Run(KernelContext& ctx, const Tensor& x, const std::vector<bool>& reduced,
             const Shape& like) {
    Reduction r(x.shape(), reduced);
    return DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
      ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), like));
      std::vector<Acc> acc(r.out_elements, Acc(0));
      const T* px = x.data<T>();
      SumInto(r, px, acc.data());
      T* po = out->data<T>();
      for (size_t j = 0; j < acc.size(); ++j) po[j] = static_cast<T>(acc[j]);
      return Status::OK();
    });
  }
};

// g (the reduced gradient) spread back over x's shape, divided by the count for a mean.
class ReduceGradKernel : public common::ReduceGradBase<ReduceGradKernel> {
 public:
  using ReduceGradBase::ReduceGradBase;
  Status Run(KernelContext& ctx, const Tensor& g, const Shape& in, const std::vector<bool>& reduced,
             bool mean) {
    Reduction r(in, reduced);
    return DispatchNumeric(g.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, g.dtype(), in));
      const T* pg = g.data<T>();
      T* po = out->data<T>();
      if (mean) {
        double scale = r.count > 0 ? 1.0 / static_cast<double>(r.count) : 0.0;
        r.ForEach([&](int64_t i, int64_t o) { po[i] = static_cast<T>(pg[o] * scale); });
      } else {
        r.ForEach([&](int64_t i, int64_t o) { po[i] = pg[o]; });
      }
      return Status::OK();
    });
  }
};

// Index of the maximum along one axis: the input seen as [outer, n, inner].
class ArgMaxKernel : public OpKernel {
 public:
  explicit ArgMaxKernel(const KernelInit& init)
      : axis_(std::get<int64_t>(*init.node.FindAttr("axis"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& s = x.shape();
    int64_t axis = axis_ < 0 ? axis_ + s.rank() : axis_;
    if (axis < 0 || axis >= s.rank())
      return InvalidArgument("axis {} is out of range for {}", axis_, s);
    int64_t n = s[axis];
    if (n == 0) return InvalidArgument("ArgMax over an empty axis of {}", s);
    std::vector<int64_t> dims;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < s.rank(); ++d) {
      if (d < axis) outer *= s[d];
      if (d > axis) inner *= s[d];
      if (d != axis) dims.push_back(s[d]);
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, DType::kI64, Shape(dims)));
    return DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      const T* px = x.data<T>();
      int64_t* po = out->data<int64_t>();
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          const T* p = px + o * n * inner + i;
          int64_t best = 0;
          for (int64_t k = 1; k < n; ++k) {
            if (TakesMax(p[k * inner], p[best * inner])) best = k;
          }
          po[o * inner + i] = best;
        }
      }
      return Status::OK();
    });
  }

 private:
  int64_t axis_;
};

// Running sums along an axis read from input 1 (a host scalar).
class CumSumKernel : public OpKernel {
 public:
  explicit CumSumKernel(const KernelInit& init)
      : exclusive_(*init.node.GetAttr<int64_t>("exclusive") != 0),
        reverse_(*init.node.GetAttr<int64_t>("reverse") != 0) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& a = ctx.input(1);
    if (a.num_elements() != 1) return InvalidArgument("axis must be a scalar, got {}", a.shape());
    const int rank = x.shape().rank();
    int64_t axis = a.dtype() == DType::kI32 ? a.data<int32_t>()[0] : a.data<int64_t>()[0];
    if (axis < -rank || axis >= rank || rank == 0) {
      return InvalidArgument("axis {} is out of range for {}", axis, x.shape());
    }
    if (axis < 0) axis += rank;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= x.shape()[d];
    for (int d = static_cast<int>(axis) + 1; d < rank; ++d) inner *= x.shape()[d];
    const int64_t dim = x.shape()[static_cast<int>(axis)];
    return DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), x.shape()));
      const T* px = x.data<T>();
      T* py = out->data<T>();
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t q = 0; q < inner; ++q) {
          T sum = 0;
          for (int64_t k = 0; k < dim; ++k) {
            const int64_t at = (o * dim + (reverse_ ? dim - 1 - k : k)) * inner + q;
            if (exclusive_) {
              py[at] = sum;
              sum += px[at];
            } else {
              sum += px[at];
              py[at] = sum;
            }
          }
        }
      }
      return Status::OK();
    });
  }

 private:
  bool exclusive_, reverse_;
};

}  // namespace

Status RegisterReduceKernels() {
  RETURN_IF_ERROR(RegisterKernel<ReduceKernel<Mode::kSum>>("ReduceSum", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceKernel<Mode::kMean>>("ReduceMean", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceKernel<Mode::kMax>>("ReduceMax", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceKernel<Mode::kProd>>("ReduceProd", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<CumSumKernel>("CumSum", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ArgMaxKernel>("ArgMax", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<SumToShapeOfKernel>("SumToShapeOf", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceGradKernel>("ReduceGrad", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
