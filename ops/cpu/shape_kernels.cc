// CPU kernels of Shape, ReshapeTo and Range: their shape operands are read on the host.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

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

}  // namespace

Status RegisterShapeKernels() {
  RETURN_IF_ERROR(RegisterKernel<ShapeKernel>("Shape", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ReshapeToKernel>("ReshapeTo", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<RangeKernel>("Range", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
