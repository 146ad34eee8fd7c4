// CPU kernels of Shape, ReshapeTo, Range, AxesShape and ReduceSumAxes: their shape and axes
// operands are read on the host.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"

namespace dflow::cpu {
namespace {

class ShapeKernel : public OpKernel {
 public:
  explicit ShapeKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    const Shape& s = ctx.input(0).shape();
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, DType::kI64, Shape{s.rank()}));
    for (int d = 0; d < s.rank(); ++d) out->data<int64_t>()[d] = s[d];
    return Status::OK();
  }
};

class ReshapeToKernel : public OpKernel {
 public:
  explicit ReshapeToKernel(const KernelInit& init)
      : allow_zero_(*init.node.GetAttr<int64_t>("allow_zero") != 0),
        known_(*init.node.GetAttr<std::vector<int64_t>>("known")) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& shape = ctx.input(1);
    if (shape.shape().rank() != 1 || shape.num_elements() > Shape::kMaxRank) {
      return InvalidArgument("shape must be a vector of at most {} dimensions, got {}",
                             Shape::kMaxRank, shape.shape());
    }
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < shape.num_elements(); ++i) {
      dims.push_back(shape.dtype() == DType::kI32 ? shape.data<int32_t>()[i]
                                                  : shape.data<int64_t>()[i]);
    }
    const std::string asked = fmt::format("[{}]", fmt::join(dims, ","));
    int unknown = -1;
    int64_t known = 1;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] == 0 && !allow_zero_) {
        if (static_cast<int>(i) >= x.shape().rank()) {
          return InvalidArgument("shape {} copies dimension {} of {}, which has none", asked, i,
                                 x.shape());
        }
        dims[i] = x.shape()[static_cast<int>(i)];
      }
      if (dims[i] == -1) {
        if (unknown >= 0) return InvalidArgument("shape {} has more than one -1", asked);
        unknown = static_cast<int>(i);
      } else if (dims[i] < 0) {
        return InvalidArgument("shape {} has a negative dimension", asked);
      } else if (__builtin_mul_overflow(known, dims[i], &known)) {
        return InvalidArgument("shape {} has more elements than 64 bits count", asked);
      }
    }
    const int64_t n = x.num_elements();
    if (unknown >= 0) {
      if (known == 0 || n % known != 0) {
        return InvalidArgument("cannot reshape {} ({} elements) into {}", x.shape(), n, asked);
      }
      dims[unknown] = n / known;
    } else if (known != n) {
      return InvalidArgument("cannot reshape {} ({} elements) into {}", x.shape(), n, asked);
    }
    if (!known_.empty()) {
      bool agrees = known_.size() == dims.size();
      for (size_t i = 0; agrees && i < dims.size(); ++i) {
        agrees = known_[i] < 0 || known_[i] == dims[i];
      }
      if (!agrees) {
        return InvalidArgument("reshaping {} gives {}, where the graph was built for {}", x.shape(),
                               Shape(dims), Shape(known_));
      }
    }
    ctx.set_output(0, x.Reshaped(Shape(dims)));
    return Status::OK();
  }

 private:
  bool allow_zero_;
  std::vector<int64_t> known_;
};

// At most this many elements: a Range is an index sequence, not a way to fill memory.
constexpr int64_t kMaxRange = int64_t{1} << 31;

class RangeKernel : public OpKernel {
 public:
  explicit RangeKernel(const KernelInit&) {}
  Status Compute(KernelContext& ctx) override {
    for (int i = 0; i < 3; ++i) {
      if (ctx.input(i).num_elements() != 1) {
        return InvalidArgument("input {} must hold one value, got {}", i, ctx.input(i).shape());
      }
    }
    return DispatchNumeric(ctx.input(0).dtype(), [&]<typename T>() -> Status {
      const T start = ctx.input(0).data<T>()[0];
      const T limit = ctx.input(1).data<T>()[0];
      const T delta = ctx.input(2).data<T>()[0];
      if (delta == T(0)) return InvalidArgument("delta is 0");
      const double count = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                                     static_cast<double>(delta));
      if (!(count <= static_cast<double>(kMaxRange))) {
        return InvalidArgument("a range from {} to {} by {} has more than {} elements",
                               static_cast<double>(start), static_cast<double>(limit),
                               static_cast<double>(delta), kMaxRange);
      }
      const auto n = static_cast<int64_t>(std::max(count, 0.0));
      ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, ctx.input(0).dtype(), Shape{n}));
      T* y = out->data<T>();
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(start + static_cast<T>(i) * delta);
      return Status::OK();
    });
  }
};

// The values of an i32 or i64 vector.
std::vector<int64_t> Ints(const Tensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    v.push_back(t.dtype() == DType::kI32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i]);
  }
  return v;
}

// Axes of a rank-`rank` tensor made non-negative, each once: a mask over the dimensions.
Result<std::vector<bool>> AxesMask(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<bool> mask(rank, false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) {
      return InvalidArgument("axis {} is outside [{}, {})", a, -rank, rank);
    }
    if (a < 0) a += rank;
    if (mask[a]) return InvalidArgument("axis {} is given twice", a);
    mask[a] = true;
  }
  return mask;
}

class AxesShapeKernel : public OpKernel {
 public:
  explicit AxesShapeKernel(const KernelInit& init)
      : mode_(*init.node.GetAttr<std::string>("mode")),
        noop_(*init.node.GetAttr<int64_t>("noop_with_empty_axes") != 0) {}
  Status Compute(KernelContext& ctx) override {
    if (ctx.input(0).shape().rank() != 1 || ctx.input(1).shape().rank() != 1) {
      return InvalidArgument("shape and axes must be vectors, got {} and {}", ctx.input(0).shape(),
                             ctx.input(1).shape());
    }
    const std::vector<int64_t> dims = Ints(ctx.input(0)), axes = Ints(ctx.input(1));
    const auto rank = static_cast<int64_t>(dims.size());
    std::vector<int64_t> out;
    if (mode_ == "unsqueeze") {
      const int64_t r = rank + static_cast<int64_t>(axes.size());
      if (r > Shape::kMaxRank) {
        return InvalidArgument("{} axes on a rank-{} shape: more than {} dimensions", axes.size(),
                               rank, Shape::kMaxRank);
      }
      ASSIGN_OR_RETURN(auto mask, AxesMask(axes, r));
      for (int64_t i = 0, next = 0; i < r; ++i) out.push_back(mask[i] ? 1 : dims[next++]);
    } else if (mode_ == "squeeze") {
      std::vector<bool> mask(rank, false);
      if (axes.empty()) {
        for (int64_t i = 0; i < rank; ++i) mask[i] = dims[i] == 1;
      } else {
        ASSIGN_OR_RETURN(mask, AxesMask(axes, rank));
      }
      for (int64_t i = 0; i < rank; ++i) {
        if (!mask[i]) {
          out.push_back(dims[i]);
        } else if (dims[i] != 1) {
          return InvalidArgument("axis {} of [{}] is {}, not 1: it cannot be squeezed", i,
                                 fmt::join(dims, ","), dims[i]);
        }
      }
    } else {  // reduce
      std::vector<bool> mask(rank, !noop_);
      if (!axes.empty()) {
        ASSIGN_OR_RETURN(mask, AxesMask(axes, rank));
      }
      for (int64_t i = 0; i < rank; ++i) out.push_back(mask[i] ? 1 : dims[i]);
    }
    ASSIGN_OR_RETURN(Tensor * y,
                     ctx.AllocateOutput(0, DType::kI64, Shape{static_cast<int64_t>(out.size())}));
    std::copy(out.begin(), out.end(), y->data<int64_t>());
    return Status::OK();
  }

 private:
  std::string mode_;
  bool noop_;
};

class ReduceSumAxesKernel : public OpKernel {
 public:
  explicit ReduceSumAxesKernel(const KernelInit& init)
      : keep_(*init.node.GetAttr<int64_t>("keep_dims") != 0),
        noop_(*init.node.GetAttr<int64_t>("noop_with_empty_axes") != 0) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (ctx.input(1).shape().rank() != 1) {
      return InvalidArgument("axes must be a vector, got {}", ctx.input(1).shape());
    }
    const std::vector<int64_t> axes = Ints(ctx.input(1));
    const int rank = x.shape().rank();
    if (axes.empty() && noop_) {
      ctx.set_output(0, x);
      return Status::OK();
    }
    std::vector<bool> mask(rank, true);
    if (!axes.empty()) {
      ASSIGN_OR_RETURN(mask, AxesMask(axes, rank));
    }
    // Output dimensions, and each input dimension's stride in the output (0 where reduced).
    std::vector<int64_t> out_dims, stride(rank, 0);
    for (int d = 0; d < rank; ++d) {
      if (!mask[d]) {
        out_dims.push_back(x.shape()[d]);
      } else if (keep_) {
        out_dims.push_back(1);
      }
    }
    int64_t next_stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (mask[d]) continue;
      stride[d] = next_stride;
      next_stride *= x.shape()[d];
    }
    const Shape out_shape(out_dims);
    return DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
      std::vector<Acc> acc(static_cast<size_t>(out_shape.num_elements()), Acc(0));
      std::vector<int64_t> index(rank, 0);
      const T* in = x.data<T>();
      int64_t at = 0;  // the output offset of `index`
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        acc[at] += static_cast<Acc>(in[i]);
        for (int d = rank - 1; d >= 0; --d) {  // the next index, its offset kept up
          at += stride[d];
          if (++index[d] < x.shape()[d]) break;
          at -= stride[d] * index[d];
          index[d] = 0;
        }
      }
      ASSIGN_OR_RETURN(Tensor * y, ctx.AllocateOutput(0, x.dtype(), out_shape));
      for (size_t k = 0; k < acc.size(); ++k) y->data<T>()[k] = static_cast<T>(acc[k]);
      return Status::OK();
    });
  }

 private:
  bool keep_, noop_;
};

}  // namespace

Status RegisterShapeKernels() {
  RETURN_IF_ERROR(RegisterKernel<ShapeKernel>("Shape", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReshapeToKernel>("ReshapeTo", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<RangeKernel>("Range", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<AxesShapeKernel>("AxesShape", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReduceSumAxesKernel>("ReduceSumAxes", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
