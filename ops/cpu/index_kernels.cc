// CPU kernels of Gather, GatherGrad, GatherElements and ScatterElements: plain loops over the
// index tensor. Gather copies whole slices; the element ops walk the indices' multi-index.
#include <cstring>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"

namespace dflow::cpu {
namespace {

int64_t IndexAt(const Tensor& idx, int64_t i) {
  return idx.dtype() == DType::kI32 ? idx.data<int32_t>()[i] : idx.data<int64_t>()[i];
}

// Index i of `idx` as a position along an axis of `dim` elements (negative ones from the end).
Result<int64_t> Position(const Tensor& idx, int64_t i, int64_t dim, int64_t axis) {
  const int64_t k = IndexAt(idx, i);
  if (k < -dim || k >= dim) {
    return InvalidArgument(
        "index {} (element {} of the indices) is out of range [{}, {}) for axis {}", k, i, -dim,
        dim, axis);
  }
  return k < 0 ? k + dim : k;
}

Result<int64_t> AxisAttr(const KernelInit& init) { return init.node.GetAttr<int64_t>("axis"); }

int64_t Product(const Shape& s, int from, int to) {
  int64_t p = 1;
  for (int d = from; d < to; ++d) p *= s[d];
  return p;
}

// Calls f with an unsigned integer type of the dtype's size: copies need no arithmetic.
template <typename F>
Status DispatchBytes(DType dtype, F&& f) {
  switch (DTypeSize(dtype)) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    case 8:
      return f.template operator()<uint64_t>();
    default:
      return InvalidArgument("no CPU kernel for dtype {}", dtype);
  }
}

// x seen by Gather along `axis`: `outer` blocks of `dim` slices of `inner` elements.
struct AxisSplit {
  int64_t axis, outer, dim, inner;
  AxisSplit(const Shape& xs, int64_t attr_axis)
      : axis(attr_axis < 0 ? attr_axis + xs.rank() : attr_axis),
        outer(Product(xs, 0, static_cast<int>(axis))),
        dim(xs[static_cast<int>(axis)]),
        inner(Product(xs, static_cast<int>(axis) + 1, xs.rank())) {}
};

class GatherKernel : public OpKernel {
 public:
  explicit GatherKernel(const KernelInit& init) : axis_(*AxisAttr(init)) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const Shape& xs = x.shape();
    const auto [axis, outer, dim, inner_elements] = AxisSplit(xs, axis_);
    std::vector<int64_t> dims(xs.dims().begin(), xs.dims().begin() + axis);
    dims.insert(dims.end(), idx.shape().dims().begin(), idx.shape().dims().end());
    dims.insert(dims.end(), xs.dims().begin() + axis + 1, xs.dims().end());
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), Shape(dims)));
    const size_t inner = inner_elements * DTypeSize(x.dtype());
    const int64_t n = idx.num_elements();
    const auto* src = static_cast<const char*>(x.raw_data());
    auto* dst = static_cast<char*>(out->raw_data());
    for (int64_t j = 0; j < n; ++j) {
      ASSIGN_OR_RETURN(int64_t k, Position(idx, j, dim, axis));
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(dst + (o * n + j) * inner, src + (o * dim + k) * inner, inner);
      }
    }
    return Status::OK();
  }

 private:
  int64_t axis_;
};

class GatherGradKernel : public OpKernel {
 public:
  explicit GatherGradKernel(const KernelInit& init) : axis_(*AxisAttr(init)) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& like = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const Tensor& g = ctx.input(2);
    const Shape& xs = like.shape();
    const AxisSplit split(xs, axis_);
    // Plain copies: the lambda below cannot capture structured bindings on clang 14.
    const int64_t axis = split.axis, outer = split.outer, dim = split.dim, inner = split.inner;
    const int64_t n = idx.num_elements();
    if (g.num_elements() != outer * n * inner) {
      return InvalidArgument("the gradient {} does not match the input {} gathered by indices {}",
                             g.shape(), xs, idx.shape());
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, like.dtype(), xs));
    return DispatchFloat(like.dtype(), [&]<typename T>() -> Status {
      T* y = out->data<T>();
      const T* pg = g.data<T>();
      std::fill(y, y + out->num_elements(), T(0));
      for (int64_t j = 0; j < n; ++j) {
        ASSIGN_OR_RETURN(int64_t k, Position(idx, j, dim, axis));
        for (int64_t o = 0; o < outer; ++o) {
          T* row = y + (o * dim + k) * inner;
          const T* from = pg + (o * n + j) * inner;
          for (int64_t q = 0; q < inner; ++q) row[q] += from[q];
        }
      }
      return Status::OK();
    });
  }

 private:
  int64_t axis_;
};

// Calls f(i, offset) for each element i of `idx` (row-major) with the offset in x (of shape xs)
// of the element it addresses along `axis`; stops at the first error.
template <typename F>
Status ForEachElementIndex(const Shape& xs, const Tensor& idx, int64_t axis, F&& f) {
  const Shape& is = idx.shape();
  const int rank = is.rank();
  if (rank != xs.rank())
    return InvalidArgument("indices {} must have the rank of the input {}", is, xs);
  for (int d = 0; d < rank; ++d) {
    if (d != axis && is[d] > xs[d]) {
      return InvalidArgument("indices {} exceed the input {} in dimension {}", is, xs, d);
    }
  }
  std::array<int64_t, Shape::kMaxRank> stride{};
  for (int d = rank - 1, s = 1; d >= 0; --d) {
    stride[d] = s;
    s *= static_cast<int>(xs[d]);
  }
  std::array<int64_t, Shape::kMaxRank> at{};
  const int64_t n = idx.num_elements(), dim = xs[static_cast<int>(axis)];
  int64_t base = 0;  // the offset of `at` with the axis coordinate left out
  for (int64_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(int64_t k, Position(idx, i, dim, axis));
    RETURN_IF_ERROR(f(i, base + k * stride[axis]));
    for (int d = rank - 1; d >= 0; --d) {
      if (d != axis) base += stride[d];
      if (++at[d] < is[d]) break;
      if (d != axis) base -= stride[d] * is[d];
      at[d] = 0;
    }
  }
  return Status::OK();
}

class GatherElementsKernel : public OpKernel {
 public:
  explicit GatherElementsKernel(const KernelInit& init) : axis_(*AxisAttr(init)) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const int64_t axis = axis_ < 0 ? axis_ + x.shape().rank() : axis_;
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), idx.shape()));
    return DispatchBytes(x.dtype(), [&]<typename T>() -> Status {
      const T* px = static_cast<const T*>(x.raw_data());
      T* y = static_cast<T*>(out->raw_data());
      return ForEachElementIndex(x.shape(), idx, axis, [&](int64_t i, int64_t at) {
        y[i] = px[at];
        return Status::OK();
      });
    });
  }

 private:
  int64_t axis_;
};

class ScatterElementsKernel : public OpKernel {
 public:
  explicit ScatterElementsKernel(const KernelInit& init)
      : axis_(*AxisAttr(init)), reduction_(*init.node.GetAttr<std::string>("reduction")) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const Tensor& u = ctx.input(2);
    if (u.shape() != idx.shape()) {
      return InvalidArgument("updates {} must have the shape of the indices {}", u.shape(),
                             idx.shape());
    }
    const int64_t axis = axis_ < 0 ? axis_ + x.shape().rank() : axis_;
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), x.shape()));
    if (out->num_bytes() > 0) std::memcpy(out->raw_data(), x.raw_data(), out->num_bytes());
    if (reduction_ == "none") {
      return DispatchBytes(x.dtype(), [&]<typename T>() -> Status {
        T* y = static_cast<T*>(out->raw_data());
        const T* pu = static_cast<const T*>(u.raw_data());
        return ForEachElementIndex(x.shape(), idx, axis, [&](int64_t i, int64_t at) {
          y[at] = pu[i];
          return Status::OK();
        });
      });
    }
    const bool add = reduction_ == "add";
    return DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      T* y = out->data<T>();
      const T* pu = u.data<T>();
      return ForEachElementIndex(x.shape(), idx, axis, [&](int64_t i, int64_t at) {
        y[at] = add ? y[at] + pu[i] : y[at] * pu[i];
        return Status::OK();
      });
    });
  }

 private:
  int64_t axis_;
  std::string reduction_;
};

}  // namespace

Status RegisterIndexKernels() {
  RETURN_IF_ERROR(RegisterKernel<GatherKernel>("Gather", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<GatherGradKernel>("GatherGrad", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<GatherElementsKernel>("GatherElements", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ScatterElementsKernel>("ScatterElements", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
