// CPU kernels of Transpose, Concat, Split, WriteRows, Slice, Pad, OneHot and
// CheckNumerics. Transpose, Slice and Pad share one strided copy; Concat copies contiguous
// blocks.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/parallel.h"
#include "ops/split_sizes.h"

namespace dflow::cpu {
namespace {

// Copies `shape` elements from src to dst, element i (a multi-index) at
// src[sum i_d * src_strides_d] and dst[sum i_d * dst_strides_d]. Rows (the last dimension) are
// split across the team; a row contiguous on both sides is one memcpy.
template <typename T>
void CopyStrided(const T* src, const int64_t* ss, T* dst, const int64_t* ds, const Shape& shape) {
  int rank = shape.rank();
  int64_t n = shape.num_elements();
  if (n == 0) return;
  if (rank == 0) {
    dst[0] = src[0];
    return;
  }
  const int64_t inner = shape[rank - 1], si = ss[rank - 1], di = ds[rank - 1];
  const bool contiguous = si == 1 && di == 1 && std::is_trivially_copyable_v<T>;
  ParallelFor(n / inner, std::max<int64_t>(1, kParallelGrain / inner),
              [&](int64_t begin, int64_t end) {
                // The multi-index of row `begin` and its offsets.
                std::array<int64_t, Shape::kMaxRank> idx{};
                int64_t so = 0, dof = 0;
                for (int64_t d = rank - 2, rest = begin; d >= 0; --d) {
                  idx[d] = rest % shape[d];
                  rest /= shape[d];
                  so += idx[d] * ss[d];
                  dof += idx[d] * ds[d];
                }
                for (int64_t row = begin; row < end; ++row) {
                  if (contiguous) {
                    std::memcpy(dst + dof, src + so, sizeof(T) * inner);
                  } else {
                    for (int64_t k = 0; k < inner; ++k) dst[dof + k * di] = src[so + k * si];
                  }
                  for (int d = rank - 2; d >= 0; --d) {
                    so += ss[d];
                    dof += ds[d];
                    if (++idx[d] < shape[d]) break;
                    so -= ss[d] * shape[d];
                    dof -= ds[d] * shape[d];
                    idx[d] = 0;
                  }
                }
              });
}

std::array<int64_t, Shape::kMaxRank> RowMajorStrides(const Shape& s) {
  std::array<int64_t, Shape::kMaxRank> st{};
  int64_t stride = 1;
  for (int d = s.rank() - 1; d >= 0; --d) {
    st[d] = stride;
    stride *= s[d];
  }
  return st;
}

class TransposeKernel : public OpKernel {
 public:
  explicit TransposeKernel(const KernelInit& init)
      : perm_(std::get<std::vector<int64_t>>(*init.node.FindAttr("perm"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (static_cast<int>(perm_.size()) != x.shape().rank()) {
      return InvalidArgument("perm has {} entries for input {}", perm_.size(), x.shape());
    }
    std::vector<int64_t> dims;
    auto in_strides = RowMajorStrides(x.shape());
    std::array<int64_t, Shape::kMaxRank> src{};
    for (size_t i = 0; i < perm_.size(); ++i) {
      dims.push_back(x.shape()[perm_[i]]);
      src[i] = in_strides[perm_[i]];
    }
    Shape out_shape(dims);
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), out_shape));
    auto dst = RowMajorStrides(out_shape);
    return DispatchAll(x.dtype(), [&]<typename T>() -> Status {
      CopyStrided(x.data<T>(), src.data(), out->data<T>(), dst.data(), out_shape);
      return Status::OK();
    });
  }

 private:
  std::vector<int64_t> perm_;
};

class SliceKernel : public OpKernel {
 public:
  explicit SliceKernel(const KernelInit& init)
      : begin_(std::get<std::vector<int64_t>>(*init.node.FindAttr("begin"))),
        size_(std::get<std::vector<int64_t>>(*init.node.FindAttr("size"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& s = x.shape();
    std::vector<int64_t> dims;
    int64_t offset = 0;
    auto strides = RowMajorStrides(s);
    for (int d = 0; d < s.rank(); ++d) {
      int64_t size = size_[d] < 0 ? s[d] - begin_[d] : size_[d];
      if (begin_[d] < 0 || size < 0 || begin_[d] + size > s[d]) {
        return InvalidArgument("slice [{}, {}) of dimension {} is outside its size {}", begin_[d],
                               begin_[d] + size, d, s[d]);
      }
      dims.push_back(size);
      offset += begin_[d] * strides[d];
    }
    Shape out_shape(dims);
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), out_shape));
    auto dst = RowMajorStrides(out_shape);
    return DispatchAll(x.dtype(), [&]<typename T>() -> Status {
      CopyStrided(x.data<T>() + offset, strides.data(), out->data<T>(), dst.data(), out_shape);
      return Status::OK();
    });
  }

 private:
  std::vector<int64_t> begin_, size_;
};

class PadKernel : public OpKernel {
 public:
  explicit PadKernel(const KernelInit& init)
      : pads_(std::get<std::vector<int64_t>>(*init.node.FindAttr("paddings"))),
        value_(std::get<double>(*init.node.FindAttr("value"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& s = x.shape();
    std::vector<int64_t> dims;
    for (int d = 0; d < s.rank(); ++d) dims.push_back(s[d] + pads_[2 * d] + pads_[2 * d + 1]);
    Shape out_shape(dims);
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), out_shape));
    auto dst = RowMajorStrides(out_shape);
    int64_t offset = 0;
    for (int d = 0; d < s.rank(); ++d) offset += pads_[2 * d] * dst[d];
    auto src = RowMajorStrides(s);
    return DispatchAll(x.dtype(), [&]<typename T>() -> Status {
      T fill = static_cast<T>(value_);
      for (T& v : out->flat<T>()) v = fill;
      CopyStrided(x.data<T>(), src.data(), out->data<T>() + offset, dst.data(), s);
      return Status::OK();
    });
  }

 private:
  std::vector<int64_t> pads_;
  double value_;
};

class ConcatKernel : public OpKernel {
 public:
  explicit ConcatKernel(const KernelInit& init)
      : axis_(std::get<int64_t>(*init.node.FindAttr("axis"))) {}
  Status Compute(KernelContext& ctx) override {
    const Shape& first = ctx.input(0).shape();
    int rank = first.rank();
    int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    std::vector<int64_t> dims = first.dim_vector();
    dims[axis] = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Shape& s = ctx.input(i).shape();
      for (int d = 0; d < rank; ++d) {
        if (d != axis && s[d] != first[d]) {
          return InvalidArgument("input {} has shape {}, input 0 has {}", i, s, first);
        }
      }
      dims[axis] += s[axis];
    }
    Shape out_shape(dims);
    DType dtype = ctx.input(0).dtype();
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dtype, out_shape));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= dims[d];
    for (int d = axis + 1; d < rank; ++d) inner *= dims[d];
    size_t elem = DTypeSize(dtype);
    auto* dst = static_cast<char*>(out->raw_data());
    int64_t row = dims[axis] * inner, offset = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& x = ctx.input(i);
      int64_t block = x.shape()[axis] * inner;
      const auto* src = static_cast<const char*>(x.raw_data());
      for (int64_t o = 0; o < outer; ++o) {
        if (block > 0)
          std::memcpy(dst + (o * row + offset) * elem, src + o * block * elem, block * elem);
      }
      offset += block;
    }
    return Status::OK();
  }

 private:
  int64_t axis_;
};

// The inverse of Concat: each output copies its contiguous block of every outer row, or, when
// there is one outer row (a split along the first dimension that is not 1), is a view of its
// block of the input (no copy).
class SplitKernel : public OpKernel {
 public:
  explicit SplitKernel(const KernelInit& init)
      : axis_(std::get<int64_t>(*init.node.FindAttr("axis"))),
        sizes_(std::get<std::vector<int64_t>>(*init.node.FindAttr("sizes"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& xs = x.shape();
    int rank = xs.rank();
    int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) {
      return InvalidArgument("axis {} is out of range for input {}", axis_, xs);
    }
    ASSIGN_OR_RETURN(auto pieces, ops::internal::SplitSizes(xs[axis], ctx.num_outputs(), sizes_));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= xs[d];
    for (int d = axis + 1; d < rank; ++d) inner *= xs[d];
    size_t elem = DTypeSize(x.dtype());
    const auto* src = static_cast<const char*>(x.raw_data());
    int64_t row = xs[axis] * inner, offset = 0;
    std::vector<int64_t> dims = xs.dim_vector();
    if (outer == 1) {
      for (int i = 0; i < ctx.num_outputs(); ++i) {
        dims[axis] = pieces[i];
        ctx.set_output(i, x.Part(offset, Shape(dims)));
        offset += pieces[i] * inner;
      }
      return Status::OK();
    }
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      dims[axis] = pieces[i];
      ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(i, x.dtype(), Shape(dims)));
      int64_t block = pieces[i] * inner;
      auto* dst = static_cast<char*>(out->raw_data());
      for (int64_t o = 0; o < outer && block > 0; ++o) {
        std::memcpy(dst + o * block * elem, src + (o * row + offset) * elem, block * elem);
      }
      offset += block;
    }
    return Status::OK();
  }

 private:
  int64_t axis_;
  std::vector<int64_t> sizes_;
};

// Rows of shape `ys` fit into `xs` from row `offset` (WriteRows, _WriteRowsSum).
Status CheckRowsFit(const Shape& xs, const Shape& ys, int64_t offset) {
  bool fits = xs.rank() >= 1 && xs.rank() == ys.rank() && offset >= 0 && offset + ys[0] <= xs[0];
  for (int d = 1; fits && d < xs.rank(); ++d) fits = xs[d] == ys[d];
  if (!fits) return InvalidArgument("rows of {} cannot go into {} at row {}", ys, xs, offset);
  return Status::OK();
}

class WriteRowsKernel : public OpKernel {
 public:
  explicit WriteRowsKernel(const KernelInit& init)
      : offset_(std::get<int64_t>(*init.node.FindAttr("offset"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& y = ctx.input(1);
    const Shape& xs = x.shape();
    const Shape& ys = y.shape();
    RETURN_IF_ERROR(CheckRowsFit(xs, ys, offset_));
    // x stays in its value slot while this runs, forwarded to output 0 or not.
    ASSIGN_OR_RETURN(Tensor * out, ctx.ForwardOrAllocateOutput(0, 0, x.dtype(), xs));
    if (out->raw_data() != x.raw_data() && x.num_bytes() > 0) {
      std::memcpy(out->raw_data(), x.raw_data(), x.num_bytes());
    }
    const size_t row = xs[0] > 0 ? x.num_bytes() / static_cast<size_t>(xs[0]) : 0;
    if (y.num_bytes() > 0) {
      std::memcpy(static_cast<char*>(out->raw_data()) + offset_ * row, y.raw_data(), y.num_bytes());
    }
    return Status::OK();
  }

 private:
  int64_t offset_;
};

// _WriteRowsSum (ops/manip_ops.cc): the all-reduce's own totals go straight into its result,
// scaled for a mean, in one pass over memory where an Add, a Mul and a WriteRows took three.
// It writes into x's buffer even while views of it are held (the totals sent on are views of
// rows already written); only a read-only x (another process's memory) is copied first.
class WriteRowsSumKernel : public OpKernel {
 public:
  explicit WriteRowsSumKernel(const KernelInit& init)
      : offset_(std::get<int64_t>(*init.node.FindAttr("offset"))),
        scale_(std::get<double>(*init.node.FindAttr("scale"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& y = ctx.input(1);
    const Shape& xs = x.shape();
    const Shape& ys = y.shape();
    RETURN_IF_ERROR(CheckRowsFit(xs, ys, offset_));
    for (int i = 2; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).shape() != ys || ctx.input(i).dtype() != y.dtype()) {
        return InvalidArgument("input {} is {}{} but input 1 is {}{}", i, ctx.input(i).dtype(),
                               ctx.input(i).shape(), y.dtype(), ys);
      }
    }
    if (scale_ != 1.0 && x.dtype() != DType::kF32 && x.dtype() != DType::kF64) {
      return InvalidArgument("a scale of {} needs f32 or f64, not {}", scale_, x.dtype());
    }
    Tensor z = x;
    if (x.buffer_read_only() || !x.host_accessible()) {
      ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), xs));
      if (x.num_bytes() > 0) std::memcpy(out->raw_data(), x.raw_data(), x.num_bytes());
      z = *out;
    } else {
      ctx.set_output(0, x);
    }
    const int64_t first = xs[0] > 0 ? offset_ * (x.num_elements() / xs[0]) : 0;
    Tensor rows = z.Part(first, ys);
    Status s = DispatchNumeric(x.dtype(), [&]<typename T>() -> Status {
      T* out = rows.data<T>();
      const T* a = y.data<T>();
      const int64_t n = y.num_elements();
      const int k = ctx.num_inputs() - 1;
      if (k == 1 && scale_ == 1.0) {
        if (n > 0) std::memcpy(out, a, n * sizeof(T));
      } else if (k == 2) {
        const T* b = ctx.input(2).data<T>();
        if constexpr (std::is_floating_point_v<T>) {
          if (scale_ != 1.0) {
            const T scale = static_cast<T>(scale_);
            for (int64_t j = 0; j < n; ++j) out[j] = (a[j] + b[j]) * scale;
            return Status::OK();
          }
        }
        for (int64_t j = 0; j < n; ++j) out[j] = a[j] + b[j];
      } else {
        if (n > 0) std::memmove(out, a, n * sizeof(T));
        for (int i = 2; i <= k; ++i) {
          const T* b = ctx.input(i).data<T>();
          for (int64_t j = 0; j < n; ++j) out[j] += b[j];
        }
        if constexpr (std::is_floating_point_v<T>) {
          if (scale_ != 1.0) {
            const T scale = static_cast<T>(scale_);
            for (int64_t j = 0; j < n; ++j) out[j] *= scale;
          }
        }
      }
      return Status::OK();
    });
    RETURN_IF_ERROR(s);
    ctx.set_output(1, std::move(rows));
    return Status::OK();
  }

 private:
  int64_t offset_;
  double scale_;
};

class OneHotKernel : public OpKernel {
 public:
  explicit OneHotKernel(const KernelInit& init)
      : depth_(std::get<int64_t>(*init.node.FindAttr("depth"))),
        dtype_(std::get<DType>(*init.node.FindAttr("dtype"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& idx = ctx.input(0);
    int64_t n = idx.num_elements();
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dtype_, Shape{n, depth_}));
    return DispatchAll(dtype_, [&]<typename T>() -> Status {
      T* po = out->data<T>();
      std::memset(po, 0, out->num_bytes());
      for (int64_t i = 0; i < n; ++i) {
        int64_t k = idx.dtype() == DType::kI32 ? idx.data<int32_t>()[i] : idx.data<int64_t>()[i];
        if (k >= 0 && k < depth_) po[i * depth_ + k] = T(1);
      }
      return Status::OK();
    });
  }

 private:
  int64_t depth_;
  DType dtype_;
};

class CheckNumericsKernel : public OpKernel {
 public:
  explicit CheckNumericsKernel(const KernelInit& init)
      : message_(std::get<std::string>(*init.node.FindAttr("message"))) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto check = [&]<typename T>() -> Status {
      const T* p = x.data<T>();
      for (int64_t i = 0, n = x.num_elements(); i < n; ++i) {
        if (!std::isfinite(p[i])) {
          return InvalidArgument("{}{}found {} at index {} of {}", message_,
                                 message_.empty() ? "" : ": ", std::isnan(p[i]) ? "NaN" : "Inf", i,
                                 x.shape());
        }
      }
      return Status::OK();
    };
    RETURN_IF_ERROR(x.dtype() == DType::kF32 ? check.template operator()<float>()
                                             : check.template operator()<double>());
    ctx.set_output(0, x);
    return Status::OK();
  }

 private:
  std::string message_;
};

}  // namespace

Status RegisterManipKernels() {
  RETURN_IF_ERROR(RegisterKernel<TransposeKernel>("Transpose", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<SliceKernel>("Slice", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<PadKernel>("Pad", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ConcatKernel>("Concat", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<WriteRowsKernel>("WriteRows", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<WriteRowsSumKernel>("_WriteRowsSum", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<SplitKernel>("Split", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<OneHotKernel>("OneHot", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<CheckNumericsKernel>("CheckNumerics", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
