// The converters of the ONNX ops that map onto dflow ops of their own (default domain, opsets up
// to 17), and the table of every converter (those made of other ops: composite_ops.cc).
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
#include "ops/batch_norm_ops.h"
#include "ops/conv_ops.h"
#include "ops/grad_ops.h"
#include "ops/image_ops.h"
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

// ---- convolution and pooling ------------------------------------------------------------------

// Pads {top, left, bottom, right} for a 2-D window from `pads` or auto_pad; the input's H and W
// must be known for SAME_*.
Result<std::vector<int64_t>> WindowPads(const NodeContext& c, const Shape& x,
                                        const std::vector<int64_t>& kernel,
                                        const std::vector<int64_t>& strides,
                                        const std::vector<int64_t>& dilations) {
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> p = c.attr_ints("pads").value_or(std::vector<int64_t>{0, 0, 0, 0});
    if (p.size() != 4) return InvalidArgument("pads {} for a 2-D window", fmt::join(p, ","));
    for (int64_t v : p) {
      if (v < 0) return Unimplemented("negative pads");
    }
    return std::vector<int64_t>{p[0], p[1], p[2], p[3]};
  }
  if (auto_pad == "VALID") return std::vector<int64_t>{0, 0, 0, 0};
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
    return InvalidArgument("auto_pad '{}'", auto_pad);
  }
  std::vector<int64_t> begin(2), end(2);
  for (int i = 0; i < 2; ++i) {
    const int64_t in = x.rank() == 4 ? x[2 + i] : -1;
    if (in < 0) return Unimplemented("auto_pad {} needs the input's H and W", auto_pad);
    const int64_t out = (in + strides[i] - 1) / strides[i];
    const int64_t total =
        std::max<int64_t>(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in);
    begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    end[i] = total - begin[i];
  }
  return std::vector<int64_t>{begin[0], begin[1], end[0], end[1]};
}

Status Conv(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(Output w, c.input(1));
  if (x.shape().rank() != 4 || w.shape().rank() != 4) {
    return Unimplemented("only 2-D convolutions (rank-4 input and weights) are imported, not {}",
                         x.shape());
  }
  std::vector<int64_t> kernel{w.shape()[2], w.shape()[3]};
  std::vector<int64_t> strides = c.attr_ints("strides").value_or(std::vector<int64_t>{1, 1});
  std::vector<int64_t> dilations = c.attr_ints("dilations").value_or(std::vector<int64_t>{1, 1});
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, WindowPads(c, x.shape(), kernel, strides, dilations));
  Output y = ops::Conv2D(
      c.scope(), x, w,
      {.strides = strides, .pads = pads, .dilations = dilations, .groups = c.attr_int("group", 1)});
  if (c.has_input(2)) {
    ASSIGN_OR_RETURN(Output b, c.input(2));
    y = ops::Add(c.scope(), y, ops::Reshape(c.scope(), b, {-1, 1, 1}));
  }
  c.set_output(0, y);
  return Status::OK();
}

// A 1-D window's attribute (kernel_shape, strides, dilations: one value; pads: two) as the 2-D
// window of height 1 over [N, C, 1, L].
std::optional<std::vector<int64_t>> As2D(std::optional<std::vector<int64_t>> v, int64_t one) {
  if (!v) return v;
  if (v->size() == 1) return std::vector<int64_t>{one, (*v)[0]};
  if (v->size() == 2) return std::vector<int64_t>{0, (*v)[0], 0, (*v)[1]};  // pads
  return v;
}

// The 2-D transposed convolution of x [N, C_in, H, W] by w [C_in, C_out / groups, kH, kW] to
// [N, cout, out[0], out[1]]: the input gradient of the convolution it transposes (oneDNN's
// backward-data primitive), which reads only the shape of that convolution's input: an
// uninitialized tensor of it, or zeros of a shape assembled at run time when the batch is known
// only then.
Output TransposedConv2D(const Scope& s, Output x, Output w, int64_t cout,
                        const std::vector<int64_t>& out, const ops::Conv2DAttrs& attrs) {
  Output like;
  if (x.shape()[0] >= 0) {
    like = ops::Empty(s, Shape{x.shape()[0], cout, out[0], out[1]}, x.dtype());
  } else {
    Output shape =
        ops::Concat(s,
                    {ops::Slice(s, ops::ShapeOf(s, x), {0}, {1}),
                     ops::Const(s, std::vector<int64_t>{cout, out[0], out[1]}, Shape{3})},
                    0);
    like = FilledOfShape(s, shape, x.dtype(), 0);
  }
  return ops::Conv2DBackpropInput(s, x, w, like, attrs);
}

// ConvTranspose: ONNX's weights [C_in, C_out / group, k...] are those of the convolution it
// transposes. Each spatial output size is stride * (in - 1) + output_padding + (k - 1) *
// dilation + 1 - pads, or output_shape (or in * stride for auto_pad SAME_*) with the pads it
// implies. 1-D runs as 2-D of height 1; 3-D as one 2-D transposed convolution per kernel depth
// over the depth slices (as a batch), each placed at its output depths by a Gather and summed.
Status ConvTranspose(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(Output w, c.input(1));
  const Scope& s = c.scope();
  const int rank = x.shape().rank();
  if (rank < 3 || rank > 5) {
    return Unimplemented("only 1-D, 2-D and 3-D ConvTranspose (rank 3 to 5), not {}", x.shape());
  }
  if (w.shape().rank() != rank) {
    return InvalidArgument("weights of shape {} for an input of {}", w.shape(), x.shape());
  }
  const int k = rank - 2;
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  bool known = ws.fully_defined() && xs[1] >= 0;
  for (int i = 0; i < k; ++i) known = known && xs[2 + i] >= 0;
  if (!known) {
    return Unimplemented(
        "ConvTranspose needs the input's channels and spatial size and the "
        "weights' shape, not {} and {}",
        xs, ws);
  }
  auto list = [&](const char* name, int64_t fill, int n) -> Result<std::vector<int64_t>> {
    auto v = c.attr_ints(name).value_or(std::vector<int64_t>(n, fill));
    if (static_cast<int>(v.size()) != n) {
      return InvalidArgument("{} of {} values for {} spatial dimensions", name, v.size(), k);
    }
    return v;
  };
  const int64_t group = c.attr_int("group", 1);
  const std::vector<int64_t> w_dims = ws.dim_vector();
  const std::vector<int64_t> kernel(w_dims.begin() + 2, w_dims.end());
  if (auto given = c.attr_ints("kernel_shape"); given && *given != kernel) {
    return InvalidArgument("kernel_shape {} for weights of {}", fmt::join(*given, ","), ws);
  }
  ASSIGN_OR_RETURN(auto strides, list("strides", 1, k));
  ASSIGN_OR_RETURN(auto dil, list("dilations", 1, k));
  ASSIGN_OR_RETURN(auto out_pad, list("output_padding", 0, k));
  ASSIGN_OR_RETURN(auto pads, list("pads", 0, 2 * k));
  std::vector<int64_t> out_shape = c.attr_ints("output_shape").value_or(std::vector<int64_t>{});
  if (static_cast<int>(out_shape.size()) > k) {  // N and C given too
    out_shape.erase(out_shape.begin(), out_shape.end() - k);
  }
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (out_shape.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
    for (int i = 0; i < k; ++i) out_shape.push_back(xs[2 + i] * strides[i]);
  }
  if (!out_shape.empty() && static_cast<int>(out_shape.size()) != k) {
    return InvalidArgument("output_shape of {} values for {} spatial dimensions", out_shape.size(),
                           k);
  }
  std::vector<int64_t> out(k);
  for (int i = 0; i < k; ++i) {
    const int64_t full = strides[i] * (xs[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1;
    if (!out_shape.empty()) {
      // Cropped by the pads output_shape implies; one beyond the full output has zeros after
      // it (positions no input reaches).
      const int64_t total = std::max<int64_t>(0, full - out_shape[i]);
      const int64_t half = total / 2;
      pads[i] = auto_pad == "SAME_UPPER" ? half : total - half;
      pads[k + i] = total - pads[i];
      out[i] = out_shape[i];
    } else {
      out[i] = full - pads[i] - pads[k + i];
    }
    if (out_pad[i] >= strides[i] && out_pad[i] >= dil[i]) {
      return InvalidArgument("output_padding {} not below the stride {} or dilation {}", out_pad[i],
                             strides[i], dil[i]);
    }
    if (out[i] <= 0) return InvalidArgument("an output of {} along spatial axis {}", out[i], i);
    if (out[i] > (int64_t{1} << 24)) {  // index constants of this size are built at import
      return Unimplemented("an output of {} along spatial axis {} (at most 2^24)", out[i], i);
    }
  }
  const int64_t cin = xs[1], cout = ws[1] * group;
  Output y;
  if (k == 1) {
    const Output x4 = ops::Reshape(s, x, {-1, cin, 1, xs[2]});
    const Output w4 = ops::Reshape(s, w, {ws[0], ws[1], 1, ws[2]});
    y = TransposedConv2D(s, x4, w4, cout, {1, out[0]},
                         {.strides = {1, strides[0]},
                          .pads = {0, pads[0], 0, pads[1]},
                          .dilations = {1, dil[0]},
                          .groups = group});
    y = ops::Reshape(s, y, {-1, cout, out[0]});
  } else if (k == 2) {
    y = TransposedConv2D(s, x, w, cout, out,
                         {.strides = strides, .pads = pads, .dilations = dil, .groups = group});
  } else {
    const int64_t depth = xs[2];
    const Output slices =
        ops::Reshape(s, ops::Transpose(s, x, {0, 2, 1, 3, 4}), {-1, cin, xs[3], xs[4]});
    for (int64_t kd = 0; kd < kernel[0]; ++kd) {
      const Output wk = ops::Reshape(s, ops::Slice(s, w, {0, 0, kd, 0, 0}, {-1, -1, 1, -1, -1}),
                                     {ws[0], ws[1], ws[3], ws[4]});
      Output z = TransposedConv2D(s, slices, wk, cout, {out[1], out[2]},
                                  {.strides = {strides[1], strides[2]},
                                   .pads = {pads[1], pads[2], pads[4], pads[5]},
                                   .dilations = {dil[1], dil[2]},
                                   .groups = group});
      z = ops::Reshape(s, z, {-1, depth, cout, out[1], out[2]});
      // Input depth d lands at output depth d * stride + kd * dilation - pad.
      std::vector<int64_t> from(out[0], 0);
      std::vector<bool> lands(out[0], false);
      for (int64_t d = 0; d < depth; ++d) {
        const int64_t o = d * strides[0] + kd * dil[0] - pads[0];
        if (o >= 0 && o < out[0]) {
          from[o] = d;
          lands[o] = true;
        }
      }
      Output placed = ops::Select(
          s, ops::Const(s, Tensor::FromVector<bool>(lands, Shape{1, out[0], 1, 1, 1})),
          ops::Gather(s, z, ops::Const(s, from, Shape{out[0]}), 1), ScalarLike(s, z, 0));
      y = y.valid() ? ops::Add(s, y, placed) : placed;
    }
    y = ops::Transpose(s, y, {0, 2, 1, 3, 4});
  }
  if (c.has_input(2)) {
    ASSIGN_OR_RETURN(Output b, c.input(2));
    std::vector<int64_t> per_channel(k + 1, 1);
    per_channel[0] = -1;
    y = ops::Add(s, y, ops::Reshape(s, b, per_channel));
  }
  c.set_output(0, y);
  return Status::OK();
}

// Resize (opset 11 on: roi, scales, sizes inputs, each of which may be absent or empty) and
// Upsample (scales; asymmetric coordinates, nearest rounding down): dflow's Resize, whose
// operands are read as the graph runs; the output dimensions ONNX's shape inference knows are
// kept (and checked at run time).
Status ResizeOp(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const Scope& s = c.scope();
  if (!IsFloatingPoint(x.dtype()) || ComputeDType(x.dtype()) != x.dtype()) {
    return Unimplemented("Resize of {} (f32 and f64)", DTypeName(x.dtype()));
  }
  const bool upsample = c.node().op_type() == "Upsample" || c.opset() < 11;
  auto operand = [&](int i, DType dtype) -> Result<Output> {
    if (i < 0 || !c.has_input(i)) return ops::Const(s, Tensor(dtype, Shape{0}));
    ASSIGN_OR_RETURN(Output v, c.input(i));
    return v.dtype() == dtype ? v : ops::Cast(s, v, dtype);
  };
  ASSIGN_OR_RETURN(Output roi, operand(upsample ? -1 : 1, DType::kF32));
  ASSIGN_OR_RETURN(Output scales, operand(upsample ? 1 : 2, DType::kF32));
  ASSIGN_OR_RETURN(Output sizes, operand(upsample ? -1 : 3, DType::kI64));
  ops::ResizeAttrs attrs{
      .mode = c.attr_string("mode", "nearest"),
      .coordinate_transformation_mode =
          upsample ? "asymmetric" : c.attr_string("coordinate_transformation_mode", "half_pixel"),
      .nearest_mode = upsample ? "floor" : c.attr_string("nearest_mode", "round_prefer_floor"),
      .cubic_coeff_a = c.attr_float("cubic_coeff_a", -0.75f),
      .exclude_outside = c.attr_int("exclude_outside", 0) != 0,
      .extrapolation_value = c.attr_float("extrapolation_value", 0),
      .known = c.inferred_output_dims(0)};
  if (attrs.mode == "bilinear") attrs.mode = "linear";  // Upsample's older name
  if (static_cast<int>(attrs.known.size()) != x.shape().rank()) attrs.known.clear();
  c.set_output(0, ops::Resize(s, x, roi, scales, sizes, attrs));
  return Status::OK();
}

// Pooling of any spatial rank, dilations and MaxPool's Indices output, where dflow's pooling
// kernels (2-D, no dilation, no indices) do not reach: one Gather per spatial axis picks each
// offset of the window for every output position, and the offsets are combined (a running max,
// with the flat index of the first maximum; or a sum over the count of positions inside the
// input). Needs the spatial dimensions and (for indices) the channels known at import.
template <bool kMax>
Status PoolByWindows(NodeContext& c, Output x) {
  const Scope& s = c.scope();
  const Shape& xs = x.shape();
  const int k = xs.rank() - 2;
  std::vector<int64_t> in(k);
  for (int i = 0; i < k; ++i) {
    in[i] = xs[2 + i];
    if (in[i] < 0) return Unimplemented("pooling needs the spatial dimensions, not {}", xs);
  }
  auto list = [&](const char* name, int64_t fill, size_t n) {
    return c.attr_ints(name).value_or(std::vector<int64_t>(n, fill));
  };
  const std::vector<int64_t> kernel = list("kernel_shape", 1, k), strides = list("strides", 1, k),
                             dil = list("dilations", 1, k);
  std::vector<int64_t> pads = list("pads", 0, 2 * k);
  if (kernel.size() != static_cast<size_t>(k) || strides.size() != static_cast<size_t>(k) ||
      dil.size() != static_cast<size_t>(k) || pads.size() != static_cast<size_t>(2 * k)) {
    return InvalidArgument("window attributes for {} spatial dimensions", k);
  }
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    return Unimplemented("auto_pad {} with this pooling", auto_pad);
  }
  if (auto_pad == "VALID") pads.assign(2 * k, 0);
  const bool ceil_mode = c.attr_int("ceil_mode", 0) != 0;
  const bool include_pad = !kMax && c.attr_int("count_include_pad", 0) != 0;
  std::vector<int64_t> out(k), span(k);
  for (int i = 0; i < k; ++i) {
    span[i] = (kernel[i] - 1) * dil[i] + 1;
    const int64_t room = in[i] + pads[i] + pads[k + i] - span[i];
    if (room < 0) return InvalidArgument("a window of {} over {} (padded)", span[i], in[i]);
    out[i] = (ceil_mode ? (room + strides[i] - 1) / strides[i] : room / strides[i]) + 1;
    if (ceil_mode && (out[i] - 1) * strides[i] >= in[i] + pads[i]) --out[i];
  }
  const int64_t positions =
      std::accumulate(kernel.begin(), kernel.end(), int64_t{1}, std::multiplies<>());
  if (positions > 4096) return Unimplemented("a window of {} positions", positions);
  const Output wide = Widened(s, x);
  // Every offset of the window, as a multi-index.
  std::vector<int64_t> offset(k, 0);
  Output acc, best_index;
  std::vector<double> count;  // per output position (average): inside positions
  // The masks and indices below are constants of the output's spatial size, built here: bounded
  // (a file's dimensions are untrusted).
  int64_t out_size = 1;
  for (int64_t o : out) {
    if (o > (int64_t{1} << 24) / out_size) {
      return Unimplemented("pooling by window offsets to {} positions (at most 2^24)",
                           fmt::join(out, "x"));
    }
    out_size *= o;
  }
  count.assign(out_size, 0);
  const int storage_order = kMax ? static_cast<int>(c.attr_int("storage_order", 0)) : 0;
  for (int64_t w = 0; w < positions; ++w) {
    // The input position of each output position along each axis (may lie in the padding).
    std::vector<std::vector<int64_t>> at(k);
    for (int i = 0; i < k; ++i) {
      for (int64_t o = 0; o < out[i]; ++o)
        at[i].push_back(o * strides[i] + offset[i] * dil[i] - pads[i]);
    }
    // Inside mask and flat spatial index, per output position.
    std::vector<uint8_t> inside(out_size);
    std::vector<int64_t> flat(out_size);
    for (int64_t p = 0; p < out_size; ++p) {
      int64_t rest = p, index = 0, col = 0, col_stride = 1;
      bool ok = true;
      std::vector<int64_t> pos(k);
      for (int i = k - 1; i >= 0; --i) {
        pos[i] = at[i][rest % out[i]];
        rest /= out[i];
        ok = ok && pos[i] >= 0 && pos[i] < in[i];
      }
      for (int i = 0; i < k; ++i) index = index * in[i] + pos[i];
      for (int i = 0; i < k; ++i) {  // column-major (storage_order 1)
        col += pos[i] * col_stride;
        col_stride *= in[i];
      }
      inside[p] = ok;
      flat[p] = storage_order == 1 ? col : index;
      if (ok || include_pad) count[p] += 1;
    }
    // The values at those positions: clamped into the input, then masked.
    Output v = wide;
    for (int i = 0; i < k; ++i) {
      std::vector<int64_t> clamped;
      for (int64_t a : at[i]) clamped.push_back(std::clamp<int64_t>(a, 0, in[i] - 1));
      v = ops::Gather(s, v, ops::Const(s, clamped, Shape{out[i]}), 2 + i);
    }
    std::vector<int64_t> spatial_shape{1, 1};
    spatial_shape.insert(spatial_shape.end(), out.begin(), out.end());
    std::vector<bool> mask_values(inside.begin(), inside.end());
    Output mask = ops::Const(s, Tensor::FromVector<bool>(mask_values, Shape(spatial_shape)));
    const double fill = kMax ? -std::numeric_limits<double>::infinity() : 0;
    v = ops::Select(s, mask, v, ScalarLike(s, v, fill));
    if (!acc.valid()) {
      acc = v;
      if (kMax) best_index = ops::Const(s, Tensor::FromVector<int64_t>(flat, Shape(spatial_shape)));
    } else if (kMax) {
      Output better = ops::Greater(s, v, acc);
      if (c.wants_output(1)) {
        best_index = ops::Select(
            s, better, ops::Const(s, Tensor::FromVector<int64_t>(flat, Shape(spatial_shape))),
            best_index);
      }
      acc = ops::Maximum(s, acc, v);
    } else {
      acc = ops::Add(s, acc, v);
    }
    for (int i = k - 1; i >= 0; --i) {  // the next offset
      if (++offset[i] < kernel[i]) break;
      offset[i] = 0;
    }
  }
  std::vector<int64_t> spatial_shape{1, 1};
  spatial_shape.insert(spatial_shape.end(), out.begin(), out.end());
  if (!kMax) {
    acc = ops::Div(
        s, acc,
        ops::Cast(s, ops::Const(s, Tensor::FromVector<double>(count, Shape(spatial_shape))),
                  acc.dtype()));
  }
  c.set_output(0, Narrowed(s, acc, x.dtype()));
  if (kMax && c.wants_output(1)) {
    // The flat index over the whole tensor: (n * C + c) * spatial size + the spatial index.
    const int64_t channels = xs[1];
    if (channels < 0) return Unimplemented("MaxPool's Indices need the channels, not {}", xs);
    const int64_t size = std::accumulate(in.begin(), in.end(), int64_t{1}, std::multiplies<>());
    const Output batch = ops::Gather(s, ops::ShapeOf(s, x), ops::Const(s, int64_t{0}));
    std::vector<int64_t> along_n(k + 2, 1), along_c(k + 2, 1);
    along_n[0] = -1;
    along_c[1] = channels;
    std::vector<int64_t> per_channel(channels);
    for (int64_t ch = 0; ch < channels; ++ch) per_channel[ch] = ch * size;
    const Output n_part = ops::Reshape(
        s,
        ops::Mul(s, ops::Range(s, ops::Const(s, int64_t{0}), batch, ops::Const(s, int64_t{1})),
                 ops::Const(s, channels * size)),
        along_n);
    const Output c_part = ops::Const(s, Tensor::FromVector<int64_t>(per_channel, Shape(along_c)));
    c.set_output(1, ops::Add(s, ops::Add(s, best_index, c_part), n_part));
  }
  return Status::OK();
}

template <bool kMax>
Status Pool(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const Scope& s = c.scope();
  const DType dtype = x.dtype();
  {
    // What dflow's pooling kernels do not cover: other spatial ranks, dilations, indices.
    const auto dil = c.attr_ints("dilations");
    const bool dilated =
        dil && std::any_of(dil->begin(), dil->end(), [](int64_t d) { return d != 1; });
    const int rank = x.shape().rank();
    if (rank >= 3 && (rank > 4 || dilated || (kMax && c.wants_output(1)))) {
      return PoolByWindows<kMax>(c, x);
    }
  }
  if (x.shape().rank() == 3) {
    // 1-D: pooled as [N, C, 1, L] with a window of height 1.
    const int64_t channels = x.shape()[1], length = x.shape()[2];
    if (channels < 0 || length < 0) {
      return Unimplemented("1-D pooling needs the input's channels and length, not {}", x.shape());
    }
    if (c.attr_string("auto_pad", "NOTSET") != "NOTSET" &&
        c.attr_string("auto_pad", "NOTSET") != "VALID") {
      return Unimplemented("1-D pooling with auto_pad {}", c.attr_string("auto_pad", ""));
    }
    if (c.attr_int("ceil_mode", 0) != 0) return Unimplemented("ceil_mode 1");
    if (kMax && c.wants_output(1)) return Unimplemented("MaxPool's Indices output");
    auto kernel = As2D(c.attr_ints("kernel_shape"), 1);
    if (!kernel || kernel->size() != 2) return InvalidArgument("kernel_shape of 1 value needed");
    auto strides = As2D(c.attr_ints("strides"), 1).value_or(std::vector<int64_t>{1, 1});
    auto dil = As2D(c.attr_ints("dilations"), 1).value_or(std::vector<int64_t>{1, 1});
    if (dil != std::vector<int64_t>{1, 1}) {
      return Unimplemented("pooling dilations {}", fmt::join(dil, ","));
    }
    std::vector<int64_t> pads{0, 0, 0, 0};
    if (c.attr_string("auto_pad", "NOTSET") == "NOTSET") {
      pads = As2D(c.attr_ints("pads"), 0).value_or(pads);
    }
    if (pads.size() != 4) return InvalidArgument("pads of 2 values needed");
    Output x4 = Widened(s, ops::Reshape(s, x, {-1, channels, 1, length}));
    if (!kMax && c.attr_int("count_include_pad", 0) != 0 && (pads[1] > 0 || pads[3] > 0)) {
      x4 = ops::Pad(s, x4, {0, 0, 0, 0, 0, 0, pads[1], pads[3]}, 0);
      pads = {0, 0, 0, 0};
    }
    ops::PoolAttrs attrs{.ksize = *kernel, .strides = strides, .pads = pads};
    Output y = kMax ? ops::MaxPool(s, x4, attrs) : ops::AvgPool(s, x4, attrs);
    if (!y.valid()) return s.status();
    c.set_output(0, Narrowed(s, ops::Reshape(s, y, {-1, channels, y.shape()[3]}), dtype));
    return Status::OK();
  }
  if (x.shape().rank() != 4) {
    return Unimplemented("only 1-D and 2-D pooling (rank-3 and rank-4 input) is imported");
  }
  // Pooling takes floating point: uint8 goes through float32 (exactly).
  x = dtype == DType::kU8 ? ops::Cast(s, x, DType::kF32) : Widened(s, x);
  const bool ceil_mode = c.attr_int("ceil_mode", 0) != 0;
  if (kMax && c.attr_int("storage_order", 0) != 0) return Unimplemented("storage_order 1");
  if (kMax && c.wants_output(1)) return Unimplemented("MaxPool's Indices output");
  auto dil = c.attr_ints("dilations").value_or(std::vector<int64_t>{1, 1});
  if (dil != std::vector<int64_t>{1, 1})
    return Unimplemented("pooling dilations {}", fmt::join(dil, ","));
  auto kernel = c.attr_ints("kernel_shape");
  if (!kernel || kernel->size() != 2) return InvalidArgument("kernel_shape of 2 values needed");
  std::vector<int64_t> strides = c.attr_ints("strides").value_or(std::vector<int64_t>{1, 1});
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, WindowPads(c, x.shape(), *kernel, strides, dil));
  if (ceil_mode) {
    // The last, partial window too: padding at the end that the pooling ignores (a max of the
    // elements there; an average over them alone) gives the floor formula ceil's count. A
    // window that would start past the input and its begin padding is dropped, as ONNX's.
    for (int i = 0; i < 2; ++i) {
      const int64_t in = x.shape()[2 + i];
      if (in < 0) return Unimplemented("ceil_mode 1 needs the input's H and W");
      const int64_t span = in + pads[i] + pads[2 + i] - (*kernel)[i];
      int64_t out = (span + strides[i] - 1) / strides[i] + 1;
      if ((out - 1) * strides[i] >= in + pads[i]) --out;
      pads[2 + i] += std::max<int64_t>(0, (out - 1) * strides[i] - span);
    }
    if (!kMax && c.attr_int("count_include_pad", 0) != 0) {
      return Unimplemented("ceil_mode 1 with count_include_pad 1");
    }
  }
  if (!kMax && c.attr_int("count_include_pad", 0) != 0 &&
      std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p > 0; })) {
    // The padding's zeros count in the average: pad explicitly, then pool without padding.
    x = ops::Pad(c.scope(), x, {0, 0, 0, 0, pads[0], pads[2], pads[1], pads[3]}, 0);
    pads = {0, 0, 0, 0};
  }
  ops::PoolAttrs attrs{.ksize = *kernel, .strides = strides, .pads = pads};
  Output y = kMax ? ops::MaxPool(s, x, attrs) : ops::AvgPool(s, x, attrs);
  c.set_output(0, Narrowed(s, y, dtype));
  return Status::OK();
}

Status GlobalAveragePool(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  if (x.shape().rank() != 4) return Unimplemented("only rank-4 GlobalAveragePool is imported");
  c.set_output(0, ops::GlobalAvgPool(c.scope(), x));
  return Status::OK();
}

Status GlobalMaxPool(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  if (x.shape().rank() != 4) return Unimplemented("only rank-4 GlobalMaxPool is imported");
  c.set_output(0, ops::ReduceMax(c.scope(), x, {2, 3}, {.keep_dims = true}));
  return Status::OK();
}

// BatchNormalization in training mode: normalized by the batch's mean and (biased) variance
// per channel; the running statistics out are momentum * running + (1 - momentum) * batch's.
Status BatchNormalizationTraining(NodeContext& c) {
  std::vector<Output> in;
  for (int i = 0; i < 5; ++i) {
    ASSIGN_OR_RETURN(Output v, c.input(i));
    in.push_back(v);
  }
  const Output x = in[0];
  const int rank = x.shape().rank();
  if (rank < 2) return Unimplemented("BatchNormalization of rank {} (2 or more)", rank);
  std::vector<int64_t> axes{0}, per_channel{1, -1};
  for (int d = 2; d < rank; ++d) {
    axes.push_back(d);
    per_channel.push_back(1);
  }
  const Scope& s = c.scope();
  auto channels = [&](Output v) { return ops::Reshape(s, v, per_channel); };
  const Output mean = ops::ReduceMean(s, x, axes);
  const Output centered = ops::Sub(s, x, channels(mean));
  const Output var = ops::ReduceMean(s, ops::Square(s, centered), axes);
  const Output inv_std =
      ops::Rsqrt(s, ops::Add(s, var, ScalarLike(s, var, c.attr_float("epsilon", 1e-5f))));
  c.set_output(0, ops::Add(s, ops::Mul(s, centered, channels(ops::Mul(s, inv_std, in[1]))),
                           channels(in[2])));
  const float momentum = c.attr_float("momentum", 0.9f);
  auto running = [&](Output old, Output batch) {
    return ops::Add(s, ops::Mul(s, old, ScalarLike(s, old, momentum)),
                    ops::Mul(s, batch, ScalarLike(s, batch, 1 - momentum)));
  };
  c.set_output(1, running(in[3], mean));
  c.set_output(2, running(in[4], var));
  return Status::OK();
}

Status BatchNormalization(NodeContext& c) {
  if (c.attr_int("training_mode", 0) != 0) return BatchNormalizationTraining(c);
  if (c.wants_output(1) || c.wants_output(2)) {
    return Unimplemented("BatchNormalization's running statistics out without training_mode");
  }
  std::vector<Output> in;
  for (int i = 0; i < 5; ++i) {
    ASSIGN_OR_RETURN(Output v, c.input(i));
    in.push_back(v);
  }
  c.set_output(0, ops::BatchNormInference(c.scope(), in[0], in[1], in[2], in[3], in[4],
                                          {.epsilon = c.attr_float("epsilon", 1e-5f)}));
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
        {"AveragePool", Pool<false>},
        {"BatchNormalization", BatchNormalization},
        {"Cast", Cast},
        {"Ceil", Unary<ops::Ceil>},
        {"Clip", Clip},
        {"Concat", Concat},
        {"CumSum", CumSum},
        {"Constant", ConstantOp},
        {"Conv", Conv},
        {"Resize", ResizeOp},
        {"Upsample", ResizeOp},
        {"ConvTranspose", ConvTranspose},
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
        {"GlobalAveragePool", GlobalAveragePool},
        {"GlobalMaxPool", GlobalMaxPool},
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
        {"MaxPool", Pool<true>},
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
    return table;
  }();
  return converters;
}

}  // namespace dflow::onnx
