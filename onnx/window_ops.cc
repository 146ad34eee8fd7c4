// The converters of the ONNX ops that slide a window over an image or rescale it: Conv,
// ConvTranspose, MaxPool, AveragePool, the global pools, Resize and Upsample; and
// BatchNormalization. Attribute values dflow cannot run are refused by name.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>

#include "onnx/converter_util.h"
#include "onnx/node_context.h"
#include "ops/array_ops.h"
#include "ops/batch_norm_ops.h"
#include "ops/conv_ops.h"
#include "ops/image_ops.h"
#include "ops/index_ops.h"
#include "ops/logic_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/shape_ops.h"
#include "ops/unary_ops.h"

namespace dflow::onnx {
namespace {

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

}  // namespace

void AddWindowConverters(std::map<std::string, Converter>& table) {
  const std::map<std::string, Converter> window = {
      {"AveragePool", Pool<false>},
      {"BatchNormalization", BatchNormalization},
      {"Conv", Conv},
      {"ConvTranspose", ConvTranspose},
      {"GlobalAveragePool", GlobalAveragePool},
      {"GlobalMaxPool", GlobalMaxPool},
      {"MaxPool", Pool<true>},
      {"Resize", ResizeOp},
      {"Upsample", ResizeOp},
  };
  table.insert(window.begin(), window.end());
}

}  // namespace dflow::onnx
