// The converters of the ONNX ops that map onto dflow ops of their own (default domain, opsets up
// to 17), and the table of every converter (those made of other ops: composite_ops.cc; the
// indexing ops: gather_ops.cc; convolution, pooling, resizing, batch norm: window_ops.cc).
// Attribute values dflow cannot run are refused by name, never ignored.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

#include "onnx/converter_util.h"
#include "onnx/node_context.h"
#include "onnx/tensor_proto.h"
#include "ops/array_ops.h"
#include "ops/grad_ops.h"
#include "ops/index_ops.h"
#include "ops/logic_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/random_ops.h"
#include "ops/shape_ops.h"
#include "ops/unary_ops.h"

namespace dflow::onnx {
namespace {

// ---- element-wise -----------------------------------------------------------------------------

template <Output (*F)(const Scope&, Output, Output)>
Status Binary(NodeContext& c) {
  ASSIGN_OR_RETURN(Output a, c.input(0));
  ASSIGN_OR_RETURN(Output b, c.input(1));
  // uint8 and float16 operands go through a dtype dflow's kernels take, and back.
  const DType dtype = a.dtype();
  if (b.dtype() == dtype && ComputeDType(dtype) != dtype) {
    const Scope& s = c.scope();
    c.set_output(0, Narrowed(s, F(s, Widened(s, a), Widened(s, b)), dtype));
    return Status::OK();
  }
  c.set_output(0, F(c.scope(), a, b));
  return Status::OK();
}

// ONNX's Pow takes an exponent of another type than the base, and integer bases; the result
// has the base's type. dflow's Pow is floating point: the exponent is cast to the base's type,
// and integers go through f64 (exact for every power an int32 or int64 can hold) and back.
Status Pow(NodeContext& c) {
  ASSIGN_OR_RETURN(Output a, c.input(0));
  ASSIGN_OR_RETURN(Output b, c.input(1));
  const Scope& s = c.scope();
  const DType out = a.dtype();
  const bool integer = out == DType::kI32 || out == DType::kI64;
  const DType compute = integer ? DType::kF64 : out;
  if (a.dtype() != compute) a = ops::Cast(s, a, compute);
  if (b.dtype() != compute) b = ops::Cast(s, b, compute);
  Output y = ops::Pow(s, a, b);
  c.set_output(0, integer ? ops::Cast(s, y, out) : y);
  return Status::OK();
}

template <Output (*F)(const Scope&, Output)>
Status Unary(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  c.set_output(0, F(c.scope(), x));
  return Status::OK();
}

// Max, Min, Sum, Mean: variadic with broadcasting.
template <Output (*F)(const Scope&, Output, Output), bool kMean = false>
Status Variadic(NodeContext& c) {
  const Scope& s = c.scope();
  ASSIGN_OR_RETURN(Output acc, c.input(0));
  const DType dtype = acc.dtype();
  acc = Widened(s, acc);
  for (int i = 1; i < c.num_inputs(); ++i) {
    ASSIGN_OR_RETURN(Output x, c.input(i));
    acc = F(s, acc, x.dtype() == dtype ? Widened(s, x) : x);
  }
  if (kMean) acc = ops::Div(s, acc, ScalarLike(s, acc, c.num_inputs()));
  c.set_output(0, Narrowed(s, acc, dtype));
  return Status::OK();
}

Status Identity(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  c.set_output(0, ops::Identity(c.scope(), x));
  return Status::OK();
}

// x != x holds for NaN only.
Status IsNaN(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  c.set_output(0, ops::NotEqual(c.scope(), x, x));
  return Status::OK();
}

// x equal to +inf (detect_positive) or -inf (detect_negative), both by default.
Status IsInf(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const bool pos = c.attr_int("detect_positive", 1) != 0;
  const bool neg = c.attr_int("detect_negative", 1) != 0;
  const Scope& s = c.scope();
  const double inf = std::numeric_limits<double>::infinity();
  Output y;
  if (pos && neg) {
    y = ops::Equal(s, ops::Abs(s, x), ScalarLike(s, x, inf));
  } else if (pos || neg) {
    y = ops::Equal(s, x, ScalarLike(s, x, pos ? inf : -inf));
  } else {
    y = ops::Less(s, x, x);  // false everywhere
  }
  c.set_output(0, y);
  return Status::OK();
}

Status Reciprocal(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  c.set_output(0, ops::Div(c.scope(), ScalarLike(c.scope(), x, 1), x));
  return Status::OK();
}

Status LeakyRelu(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  c.set_output(0, ops::LeakyRelu(c.scope(), x, c.attr_float("alpha", 0.01f)));
  return Status::OK();
}

Status Cast(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(DType to, DTypeOfOnnx(static_cast<int32_t>(c.attr_int("to", 0))));
  c.set_output(0, to == x.dtype() ? ops::Identity(c.scope(), x) : ops::Cast(c.scope(), x, to));
  return Status::OK();
}

Status Clip(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  Output y = x;
  auto bound = [&](int input, const char* attr, double fallback) -> Result<std::optional<Output>> {
    if (c.opset() < 11) {
      if (c.attr(attr) == nullptr) return std::optional<Output>();
      return std::optional<Output>(ScalarLike(c.scope(), x, c.attr_float(attr, fallback)));
    }
    if (!c.has_input(input)) return std::optional<Output>();
    ASSIGN_OR_RETURN(Output b, c.input(input));
    return std::optional<Output>(b);
  };
  ASSIGN_OR_RETURN(std::optional<Output> lo, bound(1, "min", 0));
  ASSIGN_OR_RETURN(std::optional<Output> hi, bound(2, "max", 0));
  if (lo) y = ops::Maximum(c.scope(), y, *lo);
  if (hi) y = ops::Minimum(c.scope(), y, *hi);
  c.set_output(0, lo || hi ? y : ops::Identity(c.scope(), x));
  return Status::OK();
}

Status Where(NodeContext& c) {
  ASSIGN_OR_RETURN(Output cond, c.input(0));
  ASSIGN_OR_RETURN(Output a, c.input(1));
  ASSIGN_OR_RETURN(Output b, c.input(2));
  c.set_output(0, ops::Select(c.scope(), cond, a, b));
  return Status::OK();
}

// ---- matrix products --------------------------------------------------------------------------

Status MatMul(NodeContext& c) {
  ASSIGN_OR_RETURN(Output a, c.input(0));
  ASSIGN_OR_RETURN(Output b, c.input(1));
  const Shape &sa = a.shape(), &sb = b.shape();
  if (sa.unknown_rank() || sb.unknown_rank()) return Unimplemented("MatMul of unknown rank");
  if (sa.rank() == 2 && sb.rank() == 2) {
    c.set_output(0, ops::MatMul(c.scope(), a, b));
    return Status::OK();
  }
  if (sa.rank() > 2 && sb.rank() == 2) {  // [..., M, K] x [K, N]: one product of the rows
    std::vector<int64_t> out = sa.dim_vector();
    out.back() = sb[1];
    std::vector<int> from(out.size());
    std::iota(from.begin(), from.end(), 0);
    Output rows = ops::Reshape(c.scope(), a, {-1, sa[sa.rank() - 1]});
    c.set_output(0, ReshapeKeeping(c.scope(), ops::MatMul(c.scope(), rows, b), out, from, a));
    return Status::OK();
  }
  if (sa.rank() == sb.rank() && sa.rank() > 2) {
    for (int d = 0; d + 2 < sa.rank(); ++d) {
      // Unknown at import: BatchMatMul checks at run time that they agree.
      if (sa[d] != sb[d] && sa[d] >= 0 && sb[d] >= 0) {
        return Unimplemented("MatMul with broadcast batch dimensions ({} x {})", sa, sb);
      }
    }
    c.set_output(0, ops::BatchMatMul(c.scope(), a, b));
    return Status::OK();
  }
  return Unimplemented("MatMul of {} x {} (ranks 1, or batch broadcasting) is not imported", sa,
                       sb);
}

Status Gemm(NodeContext& c) {
  ASSIGN_OR_RETURN(Output a, c.input(0));
  ASSIGN_OR_RETURN(Output b, c.input(1));
  Output y = ops::MatMul(
      c.scope(), a, b,
      {.transpose_a = c.attr_int("transA", 0) != 0, .transpose_b = c.attr_int("transB", 0) != 0});
  const float alpha = c.attr_float("alpha", 1), beta = c.attr_float("beta", 1);
  if (alpha != 1) y = ops::Mul(c.scope(), y, ScalarLike(c.scope(), y, alpha));
  if (c.has_input(2) && beta != 0) {
    ASSIGN_OR_RETURN(Output bias, c.input(2));
    if (beta != 1) bias = ops::Mul(c.scope(), bias, ScalarLike(c.scope(), bias, beta));
    // A vector of N is a bias; anything else (a scalar, [1], [M, N]) broadcasts.
    const bool vector = bias.shape().rank() == 1 && bias.shape()[0] != 1;
    y = vector ? ops::BiasAdd(c.scope(), y, bias) : ops::Add(c.scope(), y, bias);
  }
  c.set_output(0, y);
  return Status::OK();
}

// ---- normalisation ----------------------------------------------------------------------------

template <bool kLog>
Status SoftmaxOp(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const int rank = x.shape().rank();
  ASSIGN_OR_RETURN(int64_t axis, Axis(c.attr_int("axis", c.opset() >= 13 ? -1 : 1), rank));
  auto f = [&](Output v) {
    return kLog ? ops::LogSoftmax(c.scope(), v) : ops::Softmax(c.scope(), v);
  };
  if (axis == rank - 1) {
    c.set_output(0, f(x));
    return Status::OK();
  }
  if (c.opset() >= 13) {  // over one axis: move it last and back
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[axis], perm[rank - 1]);
    c.set_output(0, ops::Transpose(c.scope(), f(ops::Transpose(c.scope(), x, perm)), perm));
    return Status::OK();
  }
  // Before opset 13: over the input flattened to [prod(d < axis), prod(d >= axis)].
  if (!x.shape().fully_defined()) {
    return Unimplemented("Softmax (opset {}) over axis {} of {} needs known dimensions", c.opset(),
                         axis, x.shape());
  }
  int64_t rows = 1;
  for (int d = 0; d < axis; ++d) rows *= x.shape()[d];
  Output flat = ops::Reshape(c.scope(), x, {rows, -1});
  c.set_output(0, ops::Reshape(c.scope(), f(flat), x.shape().dim_vector()));
  return Status::OK();
}

// ---- shapes -----------------------------------------------------------------------------------

// A shape known at import becomes a Reshape (0 copies resolved, at most one dimension left
// unknown); otherwise ReshapeTo resolves the shape as the graph runs.
Status Reshape(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const bool allow_zero = c.attr_int("allowzero", 0) != 0;
  auto known = c.ints_input(1);
  if (!known.ok()) {
    ASSIGN_OR_RETURN(Output shape, c.input(1));
    c.set_output(0, ops::ReshapeTo(c.scope(), x, shape, allow_zero, c.inferred_output_dims(0)));
    return Status::OK();
  }
  std::vector<int64_t> shape = *known;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (x.shape().unknown_rank() || static_cast<int>(i) >= x.shape().rank()) {
        return InvalidArgument("shape {} copies dimension {} of {}", fmt::join(shape, ","), i,
                               x.shape());
      }
      shape[i] = x.shape()[static_cast<int>(i)];
    }
  }
  if (std::count(shape.begin(), shape.end(), -1) > 1) {  // dimensions copied at run time
    c.set_output(
        0, ops::ReshapeTo(c.scope(), x,
                          ops::Const(c.scope(), *known, Shape{static_cast<int64_t>(known->size())}),
                          allow_zero, shape));
    return Status::OK();
  }
  c.set_output(0, ops::Reshape(c.scope(), x, shape));
  return Status::OK();
}

Status Flatten(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const Shape& s = x.shape();
  if (s.unknown_rank()) return Unimplemented("Flatten of unknown rank");
  int64_t axis = c.attr_int("axis", 1);
  if (axis < 0) axis += s.rank();
  if (axis < 0 || axis > s.rank()) return InvalidArgument("axis {} of {}", axis, s);
  auto product = [&](int from, int to) -> int64_t {
    int64_t p = 1;
    for (int d = from; d < to; ++d) {
      if (s[d] < 0) return -1;
      p *= s[d];
    }
    return p;
  };
  ASSIGN_OR_RETURN(std::vector<int64_t> target,
                   ReshapeTarget({product(0, static_cast<int>(axis)),
                                  product(static_cast<int>(axis), s.rank())}));
  c.set_output(0, ops::Reshape(c.scope(), x, target));
  return Status::OK();
}

Status Transpose(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  if (x.shape().unknown_rank()) return Unimplemented("Transpose of unknown rank");
  std::vector<int64_t> perm(x.shape().rank());
  std::iota(perm.rbegin(), perm.rend(), 0);
  if (auto p = c.attr_ints("perm")) perm = *p;
  c.set_output(0, ops::Transpose(c.scope(), x, perm));
  return Status::OK();
}

Status Concat(NodeContext& c) {
  std::vector<Output> xs;
  for (int i = 0; i < c.num_inputs(); ++i) {
    ASSIGN_OR_RETURN(Output x, c.input(i));
    xs.push_back(x);
  }
  ASSIGN_OR_RETURN(int64_t axis, Axis(c.attr_int("axis", 0), xs[0].shape().rank()));
  c.set_output(0,
               xs.size() == 1 ? ops::Identity(c.scope(), xs[0]) : ops::Concat(c.scope(), xs, axis));
  return Status::OK();
}

// Squeeze and Unsqueeze: a Reshape to the shape they give.
template <bool kSqueeze>
Status SqueezeOp(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  if (c.opset() >= 13 && c.has_input(1) && !c.known_input(1)) {
    // Axes known only at run time: the shape computed there.
    ASSIGN_OR_RETURN(Output axes, c.input(1));
    const Scope& sc = c.scope();
    Output shape =
        ops::AxesShape(sc, ops::ShapeOf(sc, x), axes, kSqueeze ? "squeeze" : "unsqueeze");
    c.set_output(0, ops::ReshapeTo(sc, x, shape));
    return Status::OK();
  }
  const Shape& s = x.shape();
  if (s.unknown_rank()) return Unimplemented("of unknown rank");
  std::vector<int64_t> axes;
  if (c.opset() >= 13) {
    if (c.has_input(1)) {
      ASSIGN_OR_RETURN(axes, c.ints_input(1));
    }
  } else {
    axes = c.attr_ints("axes").value_or(std::vector<int64_t>{});
  }
  std::vector<int64_t> dims = s.dim_vector();
  std::vector<int> from_x;  // the dimension of x each output dimension is (-1: inserted)
  if (kSqueeze) {
    std::vector<bool> drop(dims.size(), axes.empty());
    for (int64_t a : axes) {
      ASSIGN_OR_RETURN(int64_t axis, Axis(a, s.rank()));
      drop[axis] = true;
    }
    std::vector<int64_t> out;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (drop[d] && dims[d] == 1) continue;
      if (drop[d] && !axes.empty()) {
        if (dims[d] >= 0) return InvalidArgument("dimension {} of {} is not 1", d, s);
        continue;  // unknown at import: 1 at run time, or the reshape there fails
      }
      out.push_back(dims[d]);
      from_x.push_back(static_cast<int>(d));
    }
    dims = out;
  } else {
    const int out_rank = s.rank() + static_cast<int>(axes.size());
    std::vector<bool> inserted(out_rank, false);
    for (int64_t a : axes) {
      ASSIGN_OR_RETURN(int64_t axis, Axis(a, out_rank));
      inserted[axis] = true;
    }
    std::vector<int64_t> out;
    size_t next = 0;
    for (int d = 0; d < out_rank; ++d) {
      from_x.push_back(inserted[d] ? -1 : static_cast<int>(next));
      out.push_back(inserted[d] ? 1 : dims[next++]);
    }
    dims = out;
  }
  c.set_output(0, ReshapeKeeping(c.scope(), x, dims, from_x));
  return Status::OK();
}

Status ShapeOp(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  if (x.shape().unknown_rank()) return Unimplemented("Shape of an input of unknown rank");
  std::vector<int64_t> dims = x.shape().dim_vector();
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t start = c.attr_int("start", 0), end = c.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  std::vector<int64_t> part(dims.begin() + start, dims.begin() + end);
  if (std::count(part.begin(), part.end(), -1) > 0) {  // known as the graph runs
    Output shape = ops::ShapeOf(c.scope(), x);
    if (start > 0 || end < rank) shape = ops::Slice(c.scope(), shape, {start}, {end - start});
    c.set_output(0, shape);
    return Status::OK();
  }
  c.set_constant_output(
      0, Tensor::FromVector<int64_t>(part, Shape{static_cast<int64_t>(part.size())}));
  return Status::OK();
}

Status CumSum(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(Output axis, c.input(1));
  c.set_output(0, ops::CumSum(c.scope(), x, axis, c.attr_int("exclusive", 0) != 0,
                              c.attr_int("reverse", 0) != 0));
  return Status::OK();
}

Status Range(NodeContext& c) {
  ASSIGN_OR_RETURN(Output start, c.input(0));
  ASSIGN_OR_RETURN(Output limit, c.input(1));
  ASSIGN_OR_RETURN(Output delta, c.input(2));
  c.set_output(0, ops::Range(c.scope(), start, limit, delta));
  return Status::OK();
}

Status ConstantOp(NodeContext& c) {
  if (const auto* v = c.attr("value")) {
    ASSIGN_OR_RETURN(Tensor t, FromTensorProto(v->t(), ".", "value"));
    c.set_constant_output(0, std::move(t));
  } else if (const auto* f = c.attr("value_float")) {
    c.set_constant_output(0, Tensor::Scalar<float>(f->f()));
  } else if (const auto* fs = c.attr("value_floats")) {
    std::vector<float> v(fs->floats().begin(), fs->floats().end());
    c.set_constant_output(0, Tensor::FromVector<float>(v, Shape{static_cast<int64_t>(v.size())}));
  } else if (const auto* i = c.attr("value_int")) {
    c.set_constant_output(0, Tensor::Scalar<int64_t>(i->i()));
  } else if (const auto* is = c.attr("value_ints")) {
    std::vector<int64_t> v(is->ints().begin(), is->ints().end());
    c.set_constant_output(0, Tensor::FromVector<int64_t>(v, Shape{static_cast<int64_t>(v.size())}));
  } else {
    return Unimplemented("a Constant of this kind (sparse, string) is not imported");
  }
  return Status::OK();
}

// ---- reductions -------------------------------------------------------------------------------

template <Output (*F)(const Scope&, Output, const std::vector<int64_t>&, const ops::ReduceAttrs&),
          bool kAxesInput>
Status Reduce(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  std::vector<int64_t> axes;
  if (kAxesInput && c.opset() >= 13) {
    if (c.has_input(1) && !c.known_input(1)) {
      // Axes known only at run time (ReduceSum's, the one reduction taking them as an input
      // before opset 18).
      ASSIGN_OR_RETURN(Output axes_value, c.input(1));
      c.set_output(0, ops::ReduceSumAxes(c.scope(), x, axes_value, c.attr_int("keepdims", 1) != 0,
                                         c.attr_int("noop_with_empty_axes", 0) != 0));
      return Status::OK();
    }
    if (c.has_input(1)) {
      ASSIGN_OR_RETURN(axes, c.ints_input(1));
    }
    if (axes.empty() && c.attr_int("noop_with_empty_axes", 0) != 0) {
      c.set_output(0, ops::Identity(c.scope(), x));
      return Status::OK();
    }
  } else {
    axes = c.attr_ints("axes").value_or(std::vector<int64_t>{});
  }
  ASSIGN_OR_RETURN(axes, AllAxesIfEmpty(std::move(axes), x.shape()));
  c.set_output(0, F(c.scope(), x, axes, {.keep_dims = c.attr_int("keepdims", 1) != 0}));
  return Status::OK();
}

// ArgMax, and ArgMin as the ArgMax of -x (the first index on ties either way).
template <bool kMin>
Status ArgExtreme(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(int64_t axis, Axis(c.attr_int("axis", 0), x.shape().rank()));
  const Scope& s = c.scope();
  const bool last = c.attr_int("select_last_index", 0) != 0;
  const int64_t dim = x.shape()[static_cast<int>(axis)];
  Output v = kMin ? ops::Neg(s, x) : x;
  if (last) {  // the first extreme of x reversed along the axis is the last one of x
    if (dim < 0) return Unimplemented("select_last_index along an axis of unknown size");
    std::vector<int64_t> reversed(dim);
    for (int64_t i = 0; i < dim; ++i) reversed[i] = dim - 1 - i;
    v = ops::Gather(s, v, ops::Const(s, reversed, Shape{dim}), axis);
  }
  Output y = ops::ArgMax(s, v, axis);
  if (last) y = ops::Sub(s, ScalarLike(s, y, static_cast<double>(dim - 1)), y);
  if (c.attr_int("keepdims", 1) != 0) {
    std::vector<int64_t> dims = x.shape().dim_vector();
    dims[axis] = 1;
    ASSIGN_OR_RETURN(dims, ReshapeTarget(dims));
    y = ops::Reshape(c.scope(), y, dims);
  }
  c.set_output(0, y);
  return Status::OK();
}

// Hardmax (opset 13: along one axis): 1 at the first maximum of each row along `axis`, 0
// elsewhere, as a one-hot of the ArgMax with the axis moved last and back.
Status Hardmax(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  if (c.opset() < 13) {
    return Unimplemented("Hardmax before opset 13 (over the input flattened at the axis)");
  }
  if (x.shape().unknown_rank()) return Unimplemented("Hardmax of unknown rank");
  const int rank = x.shape().rank();
  if (rank == 0) return InvalidArgument("Hardmax of a scalar");
  ASSIGN_OR_RETURN(int64_t axis, Axis(c.attr_int("axis", -1), rank));
  const int64_t depth = x.shape()[axis];
  if (depth < 0) return Unimplemented("Hardmax along an axis of unknown size");
  std::vector<int64_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[axis], perm[rank - 1]);
  const Scope& s = c.scope();
  Output moved = axis == rank - 1 ? x : ops::Transpose(s, x, perm);
  Output rows = ops::Reshape(s, ops::ArgMax(s, moved, rank - 1), {-1});
  Output y = ops::ReshapeLike(s, ops::OneHot(s, rows, depth, x.dtype()), moved);
  c.set_output(0, axis == rank - 1 ? y : ops::Transpose(s, y, perm));
  return Status::OK();
}

// ---- slicing and padding ----------------------------------------------------------------------

// Pad's edge and reflect modes: along each padded axis, a Gather of the source index of every
// output position (the nearest edge element; the mirror image without repeating the edge).
Result<Output> PadByGather(const Scope& s, Output x, const std::vector<int64_t>& pads,
                           bool reflect) {
  const int rank = x.shape().rank();
  for (int d = 0; d < rank; ++d) {
    const int64_t begin = pads[d], end = pads[d + rank], dim = x.shape()[d];
    if (begin == 0 && end == 0) continue;
    if (dim < 0)
      return Unimplemented("padding dimension {} of {}, unknown at import", d, x.shape());
    if (dim == 0 || (reflect && (begin >= dim || end >= dim))) {
      return InvalidArgument("{} pads {} and {} on a dimension of {}", reflect ? "reflect" : "edge",
                             begin, end, dim);
    }
    if (dim + begin + end > (int64_t{1} << 24)) {  // an index constant of this size
      return Unimplemented("{} padding to {} along axis {} (at most 2^24)",
                           reflect ? "reflect" : "edge", dim + begin + end, d);
    }
    std::vector<int64_t> from;
    for (int64_t o = -begin; o < dim + end; ++o) {
      int64_t i = o;
      if (!reflect) {
        i = std::clamp<int64_t>(i, 0, dim - 1);
      } else if (dim > 1) {
        if (i < 0) i = -i;
        if (i >= dim) i = 2 * (dim - 1) - i;
      } else {
        i = 0;
      }
      from.push_back(i);
    }
    x = ops::Gather(s, x, ops::Const(s, from, Shape{static_cast<int64_t>(from.size())}), d);
  }
  return x;
}

// Pad with pads (or the constant) known only at run time: along each axis, the output
// positions as source indices (a Range from -begin; negative pads crop), gathered clamped
// (edge), mirrored (reflect), or clamped and replaced by the constant outside (constant).
Result<Output> PadAtRunTime(const Scope& s, Output x, Output pads, Output value,
                            const std::string& mode) {
  const int rank = x.shape().rank();
  if (rank < 0) return Unimplemented("Pad of unknown rank");
  if (pads.dtype() != DType::kI64) pads = ops::Cast(s, pads, DType::kI64);
  auto i64 = [&](int64_t v) { return ops::Const(s, v); };
  const Output shape = ops::ShapeOf(s, x), zero = i64(0), one = i64(1);
  if (mode == "constant") {
    value = value.valid() ? ops::Reshape(s, value, {}) : ScalarLike(s, x, 0);
  }
  Output y = x;
  for (int a = 0; a < rank; ++a) {
    const Output begin = ops::Gather(s, pads, i64(a)), end = ops::Gather(s, pads, i64(a + rank));
    const Output dim = ops::Gather(s, shape, i64(a)), last = ops::Sub(s, dim, one);
    const Output o = ops::Range(s, ops::Neg(s, begin), ops::Add(s, dim, end), one);
    Output from = ops::Maximum(s, zero, ops::Minimum(s, o, last));
    if (mode == "reflect") {
      const Output mirrored = ops::Abs(s, o);
      from = ops::Select(s, ops::Less(s, mirrored, dim), mirrored,
                         ops::Sub(s, ops::Add(s, last, last), mirrored));
    }
    Output gathered = ops::Gather(s, y, from, a);
    if (mode == "constant") {
      std::vector<int64_t> along(rank, 1);
      along[a] = -1;
      const Output inside = ops::Reshape(s, ops::Equal(s, o, from), along);
      gathered = ops::Select(s, inside, gathered, value);
    }
    y = gathered;
  }
  return y;
}

Status Pad(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const std::string mode = c.attr_string("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect") {
    return InvalidArgument("mode '{}' (constant, edge or reflect)", mode);
  }
  if (c.opset() >= 11 && !c.has_input(3) &&
      (!c.known_input(1) || (c.has_input(2) && !c.known_input(2)))) {
    ASSIGN_OR_RETURN(Output pads, c.input(1));
    Output value;
    if (c.has_input(2)) {
      ASSIGN_OR_RETURN(value, c.input(2));
    }
    ASSIGN_OR_RETURN(Output y, PadAtRunTime(c.scope(), x, pads, value, mode));
    c.set_output(0, y);
    return Status::OK();
  }
  std::vector<int64_t> pads;
  double value = 0;
  if (c.opset() >= 11) {
    ASSIGN_OR_RETURN(pads, c.ints_input(1));
    if (c.has_input(2)) {
      ASSIGN_OR_RETURN(Tensor v, c.constant_input(2));
      if (v.num_elements() != 1)
        return InvalidArgument("constant_value of {} values", v.num_elements());
      if (v.dtype() != DType::kF32) {
        return Unimplemented("a constant_value of {}", DTypeName(v.dtype()));
      }
      value = v.data<float>()[0];
    }
    if (c.has_input(3)) return Unimplemented("the axes input");
  } else {
    pads = c.attr_ints("pads").value_or(std::vector<int64_t>{});
    value = c.attr_float("value", 0);
  }
  const int rank = x.shape().rank();
  if (rank < 0 || static_cast<int>(pads.size()) != 2 * rank) {
    return InvalidArgument("pads of {} values for rank {}", pads.size(), rank);
  }
  std::vector<int64_t> paddings;
  for (int d = 0; d < rank; ++d) {
    if (pads[d] < 0 || pads[d + rank] < 0) return Unimplemented("negative pads (cropping)");
    paddings.push_back(pads[d]);
    paddings.push_back(pads[d + rank]);
  }
  if (mode != "constant") {
    ASSIGN_OR_RETURN(Output y, PadByGather(c.scope(), x, pads, mode == "reflect"));
    c.set_output(0, y);
    return Status::OK();
  }
  c.set_output(0, ops::Pad(c.scope(), x, paddings, value));
  return Status::OK();
}

Status Slice(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const Shape& s = x.shape();
  if (s.unknown_rank()) return Unimplemented("Slice of unknown rank");
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() >= 10) {
    bool at_run_time = !c.known_input(1) || !c.known_input(2);
    for (int i : {3, 4}) at_run_time |= c.has_input(i) && !c.known_input(i);
    if (at_run_time) {
      std::vector<Output> in(5);
      for (int i = 1; i < 5; ++i) {
        if (c.has_input(i)) {
          ASSIGN_OR_RETURN(in[i], c.input(i));
        }
      }
      ASSIGN_OR_RETURN(Output y, SliceAtRunTime(c.scope(), x, in[1], in[2], in[3], in[4]));
      c.set_output(0, y);
      return Status::OK();
    }
    ASSIGN_OR_RETURN(starts, c.ints_input(1));
    ASSIGN_OR_RETURN(ends, c.ints_input(2));
    if (c.has_input(3)) {
      ASSIGN_OR_RETURN(axes, c.ints_input(3));
    }
    if (c.has_input(4)) {
      ASSIGN_OR_RETURN(steps, c.ints_input(4));
    }
  } else {
    starts = c.attr_ints("starts").value_or(std::vector<int64_t>{});
    ends = c.attr_ints("ends").value_or(std::vector<int64_t>{});
    axes = c.attr_ints("axes").value_or(std::vector<int64_t>{});
  }
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (starts.size() != ends.size() || axes.size() != starts.size() ||
      (!steps.empty() && steps.size() != starts.size())) {
    return InvalidArgument("starts, ends, axes and steps of different lengths");
  }
  std::vector<int64_t> begin(s.rank(), 0), size(s.rank(), -1);
  for (size_t i = 0; i < starts.size(); ++i) {
    if (!steps.empty() && steps[i] != 1) return Unimplemented("steps other than 1");
    ASSIGN_OR_RETURN(int64_t axis, Axis(axes[i], s.rank()));
    const int64_t dim = s[static_cast<int>(axis)];
    if (dim < 0) return Unimplemented("slicing dimension {} of {}, unknown at import", axis, s);
    int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    b = std::clamp<int64_t>(b, 0, dim);
    e = std::clamp<int64_t>(e, b, dim);
    begin[axis] = b;
    size[axis] = e - b;
  }
  c.set_output(0, ops::Slice(c.scope(), x, begin, size));
  return Status::OK();
}

Status Split(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const Shape& s = x.shape();
  ASSIGN_OR_RETURN(int64_t axis, Axis(c.attr_int("axis", 0), s.rank()));
  const int64_t dim = s[static_cast<int>(axis)];
  if (dim < 0) return Unimplemented("splitting dimension {} of {}, unknown at import", axis, s);
  std::vector<int64_t> sizes;
  if (c.opset() >= 13 && c.has_input(1) && !c.known_input(1)) {
    // Sizes known only at run time: each part a Gather of its Range of indices.
    const Scope& sc = c.scope();
    ASSIGN_OR_RETURN(Output split, c.input(1));
    if (split.dtype() != DType::kI64) split = ops::Cast(sc, split, DType::kI64);
    const Output offsets = ops::CumSum(sc, split, ops::Const(sc, int64_t{0}), /*exclusive=*/true);
    for (int i = 0; i < c.num_outputs(); ++i) {
      const Output at = ops::Const(sc, int64_t{i});
      const Output start = ops::Gather(sc, offsets, at);
      const Output end = ops::Add(sc, start, ops::Gather(sc, split, at));
      c.set_output(
          i, ops::Gather(sc, x, ops::Range(sc, start, end, ops::Const(sc, int64_t{1})), axis));
    }
    return Status::OK();
  }
  if (c.opset() >= 13 && c.has_input(1)) {
    ASSIGN_OR_RETURN(sizes, c.ints_input(1));
  } else if (auto a = c.attr_ints("split")) {
    sizes = *a;
  } else {
    const int64_t n = c.num_outputs();
    for (int64_t i = 0; i < n; ++i) sizes.push_back(dim / n + (i < dim % n ? 1 : 0));
  }
  if (static_cast<int>(sizes.size()) != c.num_outputs()) {
    return InvalidArgument("{} sizes for {} outputs", sizes.size(), c.num_outputs());
  }
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<int64_t> begin(s.rank(), 0), size(s.rank(), -1);
    begin[axis] = offset;
    size[axis] = sizes[i];
    offset += sizes[i];
    c.set_output(static_cast<int>(i), ops::Slice(c.scope(), x, begin, size));
  }
  if (offset != dim) return InvalidArgument("sizes add up to {}, not {}", offset, dim);
  return Status::OK();
}

// Dropout in training mode (opset 12 on, training_mode and ratio possibly known only at run
// time): y = x * mask / (1 - ratio), mask = u >= ratio for u uniform in [0, 1) from the node's
// seed in NumPy's stream (ops::UniformLike), as ONNX's reference draws it; with training_mode
// false, x and a mask of ones.
Status TrainingDropout(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(Output training, c.input(2));
  const Scope& s = c.scope();
  if (!IsFloatingPoint(x.dtype())) return Unimplemented("Dropout of {}", DTypeName(x.dtype()));
  Output ratio = ops::Const(s, 0.5);
  if (c.has_input(1)) {
    ASSIGN_OR_RETURN(ratio, c.input(1));
  }
  ratio = ops::Reshape(s, ops::Cast(s, ratio, DType::kF64), {});
  training = ops::Reshape(s, training, {});
  const uint64_t seed = c.attr("seed") != nullptr ? static_cast<uint64_t>(c.attr_int("seed", 0))
                                                  : static_cast<uint64_t>(std::random_device{}());
  const Output u = ops::UniformLike(s, x, seed);
  const Output keep = ops::GreaterEqual(s, u, ratio);
  const Output scale = ops::Cast(
      s, ops::Div(s, ops::Const(s, 1.0), ops::Sub(s, ops::Const(s, 1.0), ratio)), x.dtype());
  const Output dropped = ops::Mul(s, ops::Mul(s, x, ops::Cast(s, keep, x.dtype())), scale);
  c.set_output(0, ops::Select(s, training, dropped, x));
  if (c.wants_output(1)) {
    const Output all = ops::GreaterEqual(s, u, ops::Const(s, 0.0));  // u >= 0: every element
    c.set_output(1, ops::Select(s, training, keep, all));
  }
  return Status::OK();
}

Status Dropout(NodeContext& c) {
  // Inference (the default) is the identity; training mode draws a random mask.
  bool training = c.opset() < 7 && c.attr_int("is_test", 0) == 0;
  if (c.opset() >= 12 && c.has_input(2) && !c.known_input(2)) return TrainingDropout(c);
  if (c.opset() >= 12 && c.has_input(2)) {
    ASSIGN_OR_RETURN(Tensor mode, c.constant_input(2));
    training = mode.dtype() == DType::kBool && mode.num_elements() == 1 && mode.data<bool>()[0];
  }
  if (training && c.opset() >= 12) return TrainingDropout(c);
  if (training) return Unimplemented("Dropout in training mode before opset 12 (is_test 0)");
  ASSIGN_OR_RETURN(Output x, c.input(0));
  c.set_output(0, ops::Identity(c.scope(), x));
  // The mask keeps every element.
  if (c.wants_output(1))
    c.set_output(1, ops::Cast(c.scope(), ops::OnesLike(c.scope(), x), DType::kBool));
  return Status::OK();
}

}  // namespace

const std::map<std::string, Converter>& Converters() {
  static const std::map<std::string, Converter> converters = [] {
    std::map<std::string, Converter> table = {
        {"Abs", Unary<ops::Abs>},
        {"Acos", Unary<ops::Acos>},
        {"Acosh", Unary<ops::Acosh>},
        {"Add", Binary<ops::Add>},
        {"ArgMax", ArgExtreme<false>},
        {"ArgMin", ArgExtreme<true>},
        {"Asin", Unary<ops::Asin>},
        {"Asinh", Unary<ops::Asinh>},
        {"Atan", Unary<ops::Atan>},
        {"Atanh", Unary<ops::Atanh>},
        {"Cast", Cast},
        {"Ceil", Unary<ops::Ceil>},
        {"Clip", Clip},
        {"Concat", Concat},
        {"CumSum", CumSum},
        {"Constant", ConstantOp},
        {"Cos", Unary<ops::Cos>},
        {"Cosh", Unary<ops::Cosh>},
        {"Div", Binary<ops::Div>},
        {"Dropout", Dropout},
        {"Equal", Binary<ops::Equal>},
        {"Erf", Unary<ops::Erf>},
        {"Exp", Unary<ops::Exp>},
        {"Flatten", Flatten},
        {"Floor", Unary<ops::Floor>},
        {"Gemm", Gemm},
        {"Greater", Binary<ops::Greater>},
        {"GreaterOrEqual", Binary<ops::GreaterEqual>},
        {"Hardmax", Hardmax},
        {"Identity", Identity},
        {"IsInf", IsInf},
        {"IsNaN", IsNaN},
        {"LeakyRelu", LeakyRelu},
        {"Less", Binary<ops::Less>},
        {"LessOrEqual", Binary<ops::LessEqual>},
        {"Log", Unary<ops::Log>},
        {"LogSoftmax", SoftmaxOp<true>},
        {"MatMul", MatMul},
        {"Max", Variadic<ops::Maximum>},
        {"Mean", Variadic<ops::Add, true>},
        {"Min", Variadic<ops::Minimum>},
        {"Mul", Binary<ops::Mul>},
        {"Neg", Unary<ops::Neg>},
        {"Pad", Pad},
        {"Pow", Pow},
        {"Range", Range},
        {"Reciprocal", Reciprocal},
        {"ReduceMax", Reduce<ops::ReduceMax, false>},
        {"ReduceMean", Reduce<ops::ReduceMean, false>},
        {"ReduceProd", Reduce<ops::ReduceProd, false>},
        {"ReduceSum", Reduce<ops::ReduceSum, true>},
        {"Relu", Unary<ops::Relu>},
        {"Reshape", Reshape},
        {"Round", Unary<ops::Round>},
        {"Shape", ShapeOp},
        {"Sigmoid", Unary<ops::Sigmoid>},
        {"Sign", Unary<ops::Sign>},
        {"Sin", Unary<ops::Sin>},
        {"Sinh", Unary<ops::Sinh>},
        {"Slice", Slice},
        {"Softmax", SoftmaxOp<false>},
        {"Split", Split},
        {"Sqrt", Unary<ops::Sqrt>},
        {"Squeeze", SqueezeOp<true>},
        {"Sub", Binary<ops::Sub>},
        {"Sum", Variadic<ops::Add>},
        {"Tan", Unary<ops::Tan>},
        {"Tanh", Unary<ops::Tanh>},
        {"Transpose", Transpose},
        {"Unsqueeze", SqueezeOp<false>},
        {"Where", Where},
    };
    AddCompositeConverters(table);
    AddGatherConverters(table);
    AddWindowConverters(table);
    return table;
  }();
  return converters;
}

}  // namespace dflow::onnx
