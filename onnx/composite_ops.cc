// The converters of the ONNX ops that dflow computes from other ops: the reductions beyond sum,
// mean and max, LayerNormalization, the logic ops, CastLike, Trilu, the activations (Elu, Selu,
// HardSwish, Mish, ...), PRelu, Size, ConstantOfShape and Expand.
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <string>

#include "onnx/converter_util.h"
#include "onnx/node_context.h"
#include "onnx/tensor_proto.h"
#include "ops/array_ops.h"
#include "ops/index_ops.h"
#include "ops/logic_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/shape_ops.h"
#include "ops/unary_ops.h"

namespace dflow::onnx {
namespace {

// The reductions ONNX has beyond sum, mean and max, from those: f(x) reduced by g, then h.
enum class Derived { kMin, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

template <Derived kKind>
Status DerivedReduce(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(std::vector<int64_t> axes,
                   AllAxesIfEmpty(c.attr_ints("axes").value_or(std::vector<int64_t>{}), x.shape()));
  const ops::ReduceAttrs attrs{.keep_dims = c.attr_int("keepdims", 1) != 0};
  const Scope& s = c.scope();
  Output y;
  switch (kKind) {
    case Derived::kMin:
      y = ops::Neg(s, ops::ReduceMax(s, ops::Neg(s, x), axes, attrs));
      break;
    case Derived::kL1:
      y = ops::ReduceSum(s, AbsOf(s, x), axes, attrs);
      break;
    case Derived::kL2:
      y = ops::Sqrt(s, ops::ReduceSum(s, ops::Square(s, x), axes, attrs));
      break;
    case Derived::kSumSquare:
      y = ops::ReduceSum(s, ops::Square(s, x), axes, attrs);
      break;
    case Derived::kLogSum:
      y = ops::Log(s, ops::ReduceSum(s, x, axes, attrs));
      break;
    case Derived::kLogSumExp:
      y = ops::Log(s, ops::ReduceSum(s, ops::Exp(s, x), axes, attrs));
      break;
  }
  c.set_output(0, y);
  return Status::OK();
}

// x normalized over `axes`: (x - mean) / sqrt(var + eps), with the mean and 1 / sqrt(var + eps)
// (the axes kept as dimensions of 1).
struct Normalized {
  Output y, mean, inv_std;
};
Normalized NormalizeOver(const Scope& s, Output x, const std::vector<int64_t>& axes, float eps) {
  Output mean = ops::ReduceMean(s, x, axes, {.keep_dims = true});
  Output d = ops::Sub(s, x, mean);
  Output var = ops::ReduceMean(s, ops::Square(s, d), axes, {.keep_dims = true});
  Output inv_std = ops::Rsqrt(s, ops::Add(s, var, ScalarLike(s, x, eps)));
  return {ops::Mul(s, d, inv_std), mean, inv_std};
}

Status LayerNormalization(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(Output scale, c.input(1));
  const int rank = x.shape().rank();
  ASSIGN_OR_RETURN(int64_t axis, Axis(c.attr_int("axis", -1), rank));
  if (c.attr_int("stash_type", 1) != 1) return Unimplemented("stash_type other than float");
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d) axes.push_back(d);
  const Scope& s = c.scope();
  const auto [normalized, mean, inv_std] =
      NormalizeOver(s, x, axes, c.attr_float("epsilon", 1e-5f));
  Output y = ops::Mul(s, normalized, scale);
  if (c.has_input(2)) {
    ASSIGN_OR_RETURN(Output bias, c.input(2));
    y = ops::Add(s, y, bias);
  }
  c.set_output(0, y);
  c.set_output(1, mean);     // Mean, reduced axes kept as 1
  c.set_output(2, inv_std);  // InvStdDev
  return Status::OK();
}

// InstanceNormalization: each (sample, channel) plane normalized over its spatial axes, then
// scaled and shifted per channel.
Status InstanceNormalization(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(Output scale, c.input(1));
  ASSIGN_OR_RETURN(Output bias, c.input(2));
  const int rank = x.shape().rank();
  if (rank < 3) return Unimplemented("InstanceNormalization of rank {} (3 or more)", rank);
  std::vector<int64_t> axes, per_channel{-1};
  for (int d = 2; d < rank; ++d) {
    axes.push_back(d);
    per_channel.push_back(1);
  }
  const Scope& s = c.scope();
  const Output normalized = NormalizeOver(s, x, axes, c.attr_float("epsilon", 1e-5f)).y;
  Output y = ops::Mul(s, normalized, ops::Reshape(s, scale, per_channel));
  c.set_output(0, ops::Add(s, y, ops::Reshape(s, bias, per_channel)));
  return Status::OK();
}

// MeanVarianceNormalization, as ONNX's function body computes it: (x - E[x]) over
// sqrt(E[x^2] - E[x]^2) + 1e-9, the means over `axes` (default 0, 2, 3).
Status MeanVarianceNormalization(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  std::vector<int64_t> axes = c.attr_ints("axes").value_or(std::vector<int64_t>{0, 2, 3});
  for (int64_t& a : axes) {
    ASSIGN_OR_RETURN(a, Axis(a, x.shape().rank()));
  }
  const Scope& s = c.scope();
  Output mean = ops::ReduceMean(s, x, axes, {.keep_dims = true});
  Output mean_of_squares = ops::ReduceMean(s, ops::Square(s, x), axes, {.keep_dims = true});
  Output std = ops::Sqrt(s, ops::Sub(s, mean_of_squares, ops::Square(s, mean)));
  c.set_output(0, ops::Div(s, ops::Sub(s, x, mean), ops::Add(s, std, ScalarLike(s, x, 1e-9))));
  return Status::OK();
}

// OneHot: `on` where the index equals the position along the new axis, `off` elsewhere; an
// index below 0 counts from the end of depth, one out of range gives a row of `off`. Indices and
// depth of any numeric type (as integers); depth may be known only at run time.
Status OneHot(NodeContext& c) {
  ASSIGN_OR_RETURN(Output indices, c.input(0));
  ASSIGN_OR_RETURN(Output depth, c.input(1));
  ASSIGN_OR_RETURN(Output values, c.input(2));
  const int rank = indices.shape().rank();
  if (rank < 0) return Unimplemented("OneHot of indices of unknown rank");
  ASSIGN_OR_RETURN(int64_t axis, Axis(c.attr_int("axis", -1), rank + 1));
  const Scope& s = c.scope();
  auto i64 = [&](Output v) { return v.dtype() == DType::kI64 ? v : ops::Cast(s, v, DType::kI64); };
  depth = ops::Reshape(s, i64(depth), {});
  indices = i64(indices);
  const Output zero = ops::Const(s, int64_t{0});
  indices = ops::Select(s, ops::Less(s, indices, zero), ops::Add(s, indices, depth), indices);
  // The indices with a 1 inserted at `axis`; the positions 0 .. depth-1 along it.
  std::vector<int64_t> along(rank + 1, 1);
  along[axis] = -1;
  Output expanded = ops::ReshapeTo(
      s, indices,
      ops::AxesShape(s, ops::ShapeOf(s, indices),
                     ops::Const(s, std::vector<int64_t>{axis}, Shape{1}), "unsqueeze"));
  Output positions = ops::Reshape(s, ops::Range(s, zero, depth, ops::Const(s, int64_t{1})), along);
  Output hot = ops::Cast(s, ops::Equal(s, expanded, positions), ComputeDType(values.dtype()));
  Output wide = Widened(s, values);
  Output off = ops::Gather(s, wide, ops::Const(s, int64_t{0}));
  Output on = ops::Gather(s, wide, ops::Const(s, int64_t{1}));
  c.set_output(
      0, Narrowed(s, ops::Add(s, off, ops::Mul(s, hot, ops::Sub(s, on, off))), values.dtype()));
  return Status::OK();
}

// Tile: along each axis, a Gather of the indices 0 .. dim*repeats - 1 modulo dim, the repeats
// read as the graph runs.
Status Tile(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(Output repeats, c.input(1));
  const int rank = x.shape().rank();
  if (rank < 0) return Unimplemented("Tile of unknown rank");
  const Scope& s = c.scope();
  if (repeats.dtype() != DType::kI64) repeats = ops::Cast(s, repeats, DType::kI64);
  const Output shape = ops::ShapeOf(s, x), zero = ops::Const(s, int64_t{0}),
               one = ops::Const(s, int64_t{1});
  Output y = x;
  for (int a = 0; a < rank; ++a) {
    const Output at = ops::Const(s, int64_t{a});
    const Output dim = ops::Gather(s, shape, at);
    const Output i = ops::Range(s, zero, ops::Mul(s, dim, ops::Gather(s, repeats, at)), one);
    y = ops::Gather(s, y, ops::Sub(s, i, ops::Mul(s, ops::Div(s, i, dim), dim)), a);
  }
  c.set_output(0, y);
  return Status::OK();
}

// HannWindow, HammingWindow, BlackmanWindow: a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N) for
// n = 0 .. size-1, N = size (periodic) or size - 1 (symmetric), computed in double; the size
// may be known only at run time.
template <int kWindow>
Status CosineWindow(NodeContext& c) {
  static constexpr double kA[3][3] = {
      {0.5, 0.5, 0}, {25.0 / 46.0, 21.0 / 46.0, 0}, {0.42, 0.5, 0.08}};  // Hann, Hamming, Blackman
  ASSIGN_OR_RETURN(Output size, c.input(0));
  const Scope& s = c.scope();
  ASSIGN_OR_RETURN(DType out, DTypeOfOnnx(static_cast<int32_t>(c.attr_int("output_datatype", 1))));
  size = ops::Cast(s, ops::Reshape(s, size, {}), DType::kF64);
  auto f64 = [&](double v) { return ops::Const(s, Tensor::Scalar<double>(v)); };
  const Output n = ops::Range(s, f64(0), size, f64(1));
  const Output period = c.attr_int("periodic", 1) != 0 ? size : ops::Sub(s, size, f64(1));
  const Output angle = ops::Div(s, ops::Mul(s, n, f64(2 * M_PI)), period);
  Output w = ops::Sub(s, f64(kA[kWindow][0]), ops::Mul(s, f64(kA[kWindow][1]), ops::Cos(s, angle)));
  if (kA[kWindow][2] != 0) {
    w = ops::Add(s, w, ops::Mul(s, f64(kA[kWindow][2]), ops::Cos(s, ops::Mul(s, angle, f64(2)))));
  }
  c.set_output(0, ops::Cast(s, w, out));
  return Status::OK();
}

// And, Or, Xor, Not on bools, through 0/1 integers (with broadcasting).
enum class Logic { kAnd, kOr, kXor, kNot };

template <Logic kKind>
Status LogicOp(NodeContext& c) {
  const Scope& s = c.scope();
  ASSIGN_OR_RETURN(Output a, c.input(0));
  if (a.dtype() != DType::kBool)
    return InvalidArgument("input of {}, not bool", DTypeName(a.dtype()));
  Output ai = ops::Cast(s, a, DType::kI32);
  Output zero = ops::Const(s, int32_t{0});
  if (kKind == Logic::kNot) {
    c.set_output(0, ops::Equal(s, ai, zero));
    return Status::OK();
  }
  ASSIGN_OR_RETURN(Output b, c.input(1));
  Output bi = ops::Cast(s, b, DType::kI32);
  switch (kKind) {
    case Logic::kAnd:
      c.set_output(0, ops::Greater(s, ops::Mul(s, ai, bi), zero));
      break;
    case Logic::kOr:
      c.set_output(0, ops::Greater(s, ops::Add(s, ai, bi), zero));
      break;
    default:
      c.set_output(0, ops::NotEqual(s, ai, bi));
  }
  return Status::OK();
}

Status CastLike(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(Output like, c.input(1));
  c.set_output(0, like.dtype() == x.dtype() ? ops::Identity(c.scope(), x)
                                            : ops::Cast(c.scope(), x, like.dtype()));
  return Status::OK();
}

// Trilu: the upper (or lower) triangle of the last two dimensions, from the k-th diagonal; the
// rest 0: x where (column - row) >= k (<= k for the lower), the differences a constant made at
// import (so those two dimensions must be known), k known at import or fed as the graph runs.
Status Trilu(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const Shape& sh = x.shape();
  if (sh.rank() < 2 || sh[sh.rank() - 1] < 0 || sh[sh.rank() - 2] < 0) {
    return Unimplemented("Trilu of {}: the last two dimensions must be known at import", sh);
  }
  const Scope& s = c.scope();
  const int64_t rows = sh[sh.rank() - 2], cols = sh[sh.rank() - 1];
  std::vector<int64_t> diff(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) diff[i * cols + j] = j - i;
  }
  Output d = ops::Const(s, diff, Shape{rows, cols});
  Output k = ops::Const(s, int64_t{0});
  if (c.has_input(1)) {
    ASSIGN_OR_RETURN(k, c.input(1));
    if (k.dtype() != DType::kI64) return InvalidArgument("k is {}, not int64", k.dtype());
    if (k.shape().num_elements() > 1) return InvalidArgument("k of shape {}", k.shape());
    if (k.shape().rank() > 0) k = ops::Reshape(s, k, {});
  }
  const bool upper = c.attr_int("upper", 1) != 0;
  Output keep = upper ? ops::GreaterEqual(s, d, k) : ops::LessEqual(s, d, k);
  c.set_output(0, ops::Select(s, keep, x, ops::ZerosLike(s, x)));
  return Status::OK();
}

// Mod: the remainder of a / b with the divisor's sign (fmod 0, integers only) or the dividend's
// (fmod 1, C's fmod), from the truncated quotient: a - trunc(a / b) * b, then + b where the
// signs differ for fmod 0.
Status Mod(NodeContext& c) {
  ASSIGN_OR_RETURN(Output a, c.input(0));
  ASSIGN_OR_RETURN(Output b, c.input(1));
  const bool fmod = c.attr_int("fmod", 0) != 0;
  const bool floating = IsFloatingPoint(a.dtype());
  if (floating && !fmod)
    return InvalidArgument("fmod 0 on {} (ONNX allows it for integers only)", a.dtype());
  const Scope& s = c.scope();
  const DType dtype = a.dtype();
  if (b.dtype() == dtype) {  // uint8 and float16 through a dtype the kernels take
    a = Widened(s, a);
    b = Widened(s, b);
  }
  Output q = ops::Div(s, a, b);
  if (floating) {  // trunc: toward zero
    q = ops::Select(s, ops::Less(s, q, ScalarLike(s, q, 0)), ops::Ceil(s, q), ops::Floor(s, q));
  }
  Output r = ops::Sub(s, a, ops::Mul(s, q, b));
  if (!fmod) {
    Output zero = ScalarLike(s, r, 0);
    auto negative = [&](Output v) { return ops::Cast(s, ops::Less(s, v, zero), DType::kI32); };
    Output differ = ops::NotEqual(s, negative(r), negative(b));
    // r != 0 and the signs differ (r != r: false everywhere, for integers).
    Output fix = ops::Select(s, ops::NotEqual(s, r, zero), differ, ops::NotEqual(s, r, r));
    r = ops::Select(s, fix, ops::Add(s, r, b), r);
  }
  c.set_output(0, Narrowed(s, r, dtype));
  return Status::OK();
}

// EyeLike: ones on the k-th diagonal of a matrix of x's (known) shape, of `dtype` or x's.
Status EyeLike(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const Shape& sh = x.shape();
  if (sh.rank() != 2 || !sh.fully_defined()) {
    return Unimplemented("EyeLike of {}: a matrix whose shape is known at import", sh);
  }
  DType dtype = x.dtype();
  if (const auto* a = c.attr("dtype")) {
    ASSIGN_OR_RETURN(dtype, DTypeOfOnnx(static_cast<int>(a->i())));
  }
  const int64_t k = c.attr_int("k", 0);
  Tensor eye(dtype, sh);
  const size_t size = DTypeSize(dtype);
  std::memset(eye.raw_data(), 0, eye.num_bytes());
  auto set_one = [&](int64_t i) -> Status {
    void* p = static_cast<char*>(eye.raw_data()) + i * size;
    switch (dtype) {
      case DType::kF32:
        *static_cast<float*>(p) = 1;
        return Status::OK();
      case DType::kF64:
        *static_cast<double*>(p) = 1;
        return Status::OK();
      case DType::kI32:
        *static_cast<int32_t*>(p) = 1;
        return Status::OK();
      case DType::kI64:
        *static_cast<int64_t*>(p) = 1;
        return Status::OK();
      case DType::kU8:
      case DType::kBool:
        *static_cast<uint8_t*>(p) = 1;
        return Status::OK();
      default:
        return Unimplemented("EyeLike of dtype {}", dtype);
    }
  };
  for (int64_t i = 0; i < sh[0]; ++i) {
    if (i + k >= 0 && i + k < sh[1]) RETURN_IF_ERROR(set_one(i * sh[1] + i + k));
  }
  c.set_constant_output(0, std::move(eye));
  return Status::OK();
}

// Shrink: x - bias where x > lambd, x + bias where x < -lambd, 0 between.
Status Shrink(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const Scope& s = c.scope();
  const double lambd = c.attr_float("lambd", 0.5f), bias = c.attr_float("bias", 0.0f);
  auto k = [&](double v) { return ScalarLike(s, x, v); };
  Output y = ops::Select(s, ops::Less(s, x, k(-lambd)), ops::Add(s, x, k(bias)), k(0));
  c.set_output(0, ops::Select(s, ops::Greater(s, x, k(lambd)), ops::Sub(s, x, k(bias)), y));
  return Status::OK();
}

// DepthToSpace and SpaceToDepth on [N, C, H, W] of known C, H, W: a reshape to six dimensions,
// a transpose and a reshape back.
template <bool kToSpace>
Status DepthSpace(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const Shape& sh = x.shape();
  if (sh.rank() != 4 || sh[1] < 0 || sh[2] < 0 || sh[3] < 0) {
    return Unimplemented("{} of {}: [N, C, H, W] with C, H and W known at import",
                         kToSpace ? "DepthToSpace" : "SpaceToDepth", sh);
  }
  const int64_t b = c.attr_int("blocksize", 0);
  if (b <= 0) return InvalidArgument("blocksize {}", b);
  const int64_t ch = sh[1], h = sh[2], w = sh[3];
  const Scope& s = c.scope();
  Output y;
  if (kToSpace) {
    if (ch % (b * b) != 0) return InvalidArgument("{} channels for blocksize {}", ch, b);
    const int64_t oc = ch / (b * b);
    const bool dcr = c.attr_string("mode", "DCR") == "DCR";
    Output six = ops::Reshape(
        s, x,
        dcr ? std::vector<int64_t>{-1, b, b, oc, h, w} : std::vector<int64_t>{-1, oc, b, b, h, w});
    Output t = ops::Transpose(
        s, six,
        dcr ? std::vector<int64_t>{0, 3, 4, 1, 5, 2} : std::vector<int64_t>{0, 1, 4, 2, 5, 3});
    y = ops::Reshape(s, t, {-1, oc, h * b, w * b});
  } else {
    if (h % b != 0 || w % b != 0) return InvalidArgument("{} for blocksize {}", sh, b);
    Output six = ops::Reshape(s, x, {-1, ch, h / b, b, w / b, b});
    Output t = ops::Transpose(s, six, {0, 3, 5, 1, 2, 4});
    y = ops::Reshape(s, t, {-1, ch * b * b, h / b, w / b});
  }
  c.set_output(0, y);
  return Status::OK();
}

enum class Activation {
  kElu,
  kSelu,
  kCelu,
  kHardSigmoid,
  kHardSwish,
  kSoftplus,
  kSoftsign,
  kMish,
  kThresholdedRelu
};

template <Activation kKind>
Status ActivationOp(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  const Scope& s = c.scope();
  auto k = [&](double v) { return ScalarLike(s, x, v); };
  auto softplus = [&](Output v) { return ops::Log(s, ops::Add(s, ops::Exp(s, v), k(1))); };
  Output y;
  switch (kKind) {
    case Activation::kElu:
    case Activation::kSelu:
    case Activation::kCelu: {
      const bool selu = kKind == Activation::kSelu, celu = kKind == Activation::kCelu;
      const double alpha = c.attr_float("alpha", selu ? 1.67326319217681884765625f : 1.0f);
      const double gamma = selu ? c.attr_float("gamma", 1.05070102214813232421875f) : 1.0;
      Output e = celu ? ops::Exp(s, ops::Div(s, x, k(alpha))) : ops::Exp(s, x);
      Output neg = ops::Mul(s, k(alpha), ops::Sub(s, e, k(1)));
      y = ops::Select(s, ops::Greater(s, x, k(0)), x, neg);
      if (celu) y = ops::Add(s, ops::Maximum(s, x, k(0)), ops::Minimum(s, k(0), neg));
      if (selu) y = ops::Mul(s, k(gamma), y);
      break;
    }
    case Activation::kHardSigmoid:
    case Activation::kHardSwish: {
      const bool swish = kKind == Activation::kHardSwish;
      const double alpha = swish ? 1.0 / 6 : c.attr_float("alpha", 0.2f);
      const double beta = swish ? 0.5 : c.attr_float("beta", 0.5f);
      Output h = ops::Maximum(
          s, k(0), ops::Minimum(s, k(1), ops::Add(s, ops::Mul(s, x, k(alpha)), k(beta))));
      y = swish ? ops::Mul(s, x, h) : h;
      break;
    }
    case Activation::kSoftplus:
      y = softplus(x);
      break;
    case Activation::kSoftsign:
      y = ops::Div(s, x, ops::Add(s, k(1), AbsOf(s, x)));
      break;
    case Activation::kMish:
      y = ops::Mul(s, x, ops::Tanh(s, softplus(x)));
      break;
    case Activation::kThresholdedRelu:
      y = ops::Select(s, ops::Greater(s, x, k(c.attr_float("alpha", 1.0f))), x, k(0));
      break;
  }
  c.set_output(0, y);
  return Status::OK();
}

Status PRelu(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  ASSIGN_OR_RETURN(Output slope, c.input(1));
  const Scope& s = c.scope();
  Output zero = ScalarLike(s, x, 0);
  c.set_output(0, ops::Select(s, ops::Less(s, x, zero), ops::Mul(s, slope, x), x));
  return Status::OK();
}

Status Size(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  if (!x.shape().fully_defined()) {
    return Unimplemented("Size of {}: known at import only when fully defined", x.shape());
  }
  c.set_constant_output(0, Tensor::Scalar<int64_t>(x.shape().num_elements()));
  return Status::OK();
}

Status ConstantOfShape(NodeContext& c) {
  Tensor value = Tensor::Scalar<float>(0);
  if (const auto* v = c.attr("value")) {
    ASSIGN_OR_RETURN(value, FromTensorProto(v->t(), ".", "value"));
    if (value.num_elements() != 1)
      return InvalidArgument("value of {} elements", value.num_elements());
  }
  if (!c.known_input(0)) {  // the shape known only at run time
    ASSIGN_OR_RETURN(Output shape, c.input(0));
    const Scope& s = c.scope();
    double v = 0;
    switch (value.dtype()) {
      case DType::kF32:
        v = value.data<float>()[0];
        break;
      case DType::kF64:
        v = value.data<double>()[0];
        break;
      case DType::kI32:
        v = value.data<int32_t>()[0];
        break;
      case DType::kI64:
        v = static_cast<double>(value.data<int64_t>()[0]);
        break;
      case DType::kBool:
        v = value.data<bool>()[0] ? 1 : 0;
        break;
      case DType::kU8:
        v = value.data<uint8_t>()[0];
        break;
      default:
        return Unimplemented("a value of {} for a shape known at run time", value.dtype());
    }
    if (shape.dtype() != DType::kI64) shape = ops::Cast(s, shape, DType::kI64);
    c.set_output(0, FilledOfShape(s, shape, value.dtype(), v));
    return Status::OK();
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.ints_input(0));
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
  if (shape.num_elements() > (int64_t{1} << 26)) {
    return Unimplemented("a constant of {} elements", shape.num_elements());
  }
  Tensor t(value.dtype(), shape);
  const size_t size = DTypeSize(value.dtype());
  for (int64_t i = 0; i < shape.num_elements(); ++i) {
    std::memcpy(static_cast<char*>(t.raw_data()) + i * size, value.raw_data(), size);
  }
  c.set_constant_output(0, std::move(t));
  return Status::OK();
}

Status Expand(NodeContext& c) {
  ASSIGN_OR_RETURN(Output x, c.input(0));
  if (!c.known_input(1)) {  // the shape known only at run time
    ASSIGN_OR_RETURN(Output shape, c.input(1));
    const Scope& s = c.scope();
    if (x.dtype() == DType::kBool) return Unimplemented("Expand of bool to a run-time shape");
    if (shape.dtype() != DType::kI64) shape = ops::Cast(s, shape, DType::kI64);
    Output zeros = FilledOfShape(s, shape, x.dtype(), 0);
    c.set_output(0, ops::Add(s, x, zeros));
    return Status::OK();
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.ints_input(1));
  ASSIGN_OR_RETURN(Shape shape, Shape::Make(dims));
  // Broadcasting against zeros of the shape (1s in it keep x's dimension).
  c.set_output(0, ops::Add(c.scope(), x, ops::Fill(c.scope(), shape, 0, x.dtype())));
  return Status::OK();
}

}  // namespace

Output FilledOfShape(const Scope& s, Output shape, DType dtype, double value) {
  Output count = ops::ReduceProd(s, shape);
  Output zeros =
      ops::Mul(s, ops::Range(s, ops::Const(s, int64_t{0}), count, ops::Const(s, int64_t{1})),
               ops::Const(s, int64_t{0}));
  // Filled in i64, f32 or f64 (what the arithmetic kernels take), then cast to `dtype`.
  Output filled;
  if (dtype == DType::kF64) {
    filled = ops::Add(s, ops::Cast(s, zeros, DType::kF64), ops::Const(s, value));
  } else if (IsFloatingPoint(dtype)) {
    filled =
        ops::Add(s, ops::Cast(s, zeros, DType::kF32), ops::Const(s, static_cast<float>(value)));
  } else {
    filled = ops::Add(s, zeros, ops::Const(s, static_cast<int64_t>(value)));
  }
  if (filled.dtype() != dtype) filled = ops::Cast(s, filled, dtype);
  return ops::ReshapeTo(s, filled, shape);
}

Result<Output> SliceAtRunTime(const Scope& s, Output x, Output starts, Output ends, Output axes,
                              Output steps) {
  const int rank = x.shape().rank();
  if (rank < 0) return Unimplemented("Slice of unknown rank");
  const Shape& ns = starts.shape();
  if (ns.rank() != 1 || ns[0] < 0) return Unimplemented("starts of unknown length {}", ns);
  const int64_t n = ns[0];
  auto i64 = [&](Output v) { return v.dtype() == DType::kI64 ? v : ops::Cast(s, v, DType::kI64); };
  auto scalar = [&](int64_t v) { return ops::Const(s, v); };
  const Output zero = scalar(0), one = scalar(1);
  starts = i64(starts);
  ends = i64(ends);
  if (axes.valid()) {
    axes = i64(axes);
  } else {
    std::vector<int64_t> all(n);
    std::iota(all.begin(), all.end(), 0);
    axes = ops::Const(s, all, Shape{n});
  }
  steps = steps.valid() ? i64(steps) : ops::Const(s, std::vector<int64_t>(n, 1), Shape{n});
  axes = ops::Select(s, ops::Less(s, axes, zero), ops::Add(s, axes, scalar(rank)), axes);
  const Output shape = ops::ShapeOf(s, x);
  Output y = x;
  for (int a = 0; a < rank; ++a) {
    // The operands' entry for this axis, if any (the mask picks it; no entry: all of it).
    const Output match = ops::Cast(s, ops::Equal(s, axes, scalar(a)), DType::kI64);
    const Output has = ops::Less(s, zero, ops::ReduceSum(s, match));
    auto pick = [&](Output v, Output otherwise) {
      return ops::Select(s, has, ops::ReduceSum(s, ops::Mul(s, v, match)), otherwise);
    };
    const Output dim = ops::Gather(s, shape, scalar(a));
    const Output step = pick(steps, one);
    const Output backward = ops::Less(s, step, zero);
    const Output dim_less_one = ops::Sub(s, dim, one);
    // Far out of range first (no overflow below), then from the end, then ONNX's clamps.
    auto bounded = [&](Output v) {
      v = ops::Maximum(s, ops::Minimum(s, v, dim), ops::Sub(s, ops::Neg(s, dim), one));
      return ops::Select(s, ops::Less(s, v, zero), ops::Add(s, v, dim), v);
    };
    Output start = bounded(pick(starts, zero));
    Output end = bounded(pick(ends, dim));
    const Output top = ops::Select(s, backward, dim_less_one, dim);
    start = ops::Maximum(s, zero, ops::Minimum(s, start, top));
    end = ops::Maximum(s, ops::Select(s, backward, ops::Neg(s, one), zero),
                       ops::Minimum(s, end, top));
    y = ops::Gather(s, y, ops::Range(s, start, end, step), a);
  }
  return y;
}

void AddCompositeConverters(std::map<std::string, Converter>& table) {
  const std::map<std::string, Converter> composite = {
      {"And", LogicOp<Logic::kAnd>},
      {"CastLike", CastLike},
      {"Celu", ActivationOp<Activation::kCelu>},
      {"BlackmanWindow", CosineWindow<2>},
      {"ConstantOfShape", ConstantOfShape},
      {"HammingWindow", CosineWindow<1>},
      {"HannWindow", CosineWindow<0>},
      {"InstanceNormalization", InstanceNormalization},
      {"MeanVarianceNormalization", MeanVarianceNormalization},
      {"OneHot", OneHot},
      {"Tile", Tile},
      {"Elu", ActivationOp<Activation::kElu>},
      {"Expand", Expand},
      {"HardSigmoid", ActivationOp<Activation::kHardSigmoid>},
      {"HardSwish", ActivationOp<Activation::kHardSwish>},
      {"LayerNormalization", LayerNormalization},
      {"Mish", ActivationOp<Activation::kMish>},
      {"Not", LogicOp<Logic::kNot>},
      {"Or", LogicOp<Logic::kOr>},
      {"PRelu", PRelu},
      {"ReduceL1", DerivedReduce<Derived::kL1>},
      {"ReduceL2", DerivedReduce<Derived::kL2>},
      {"ReduceLogSum", DerivedReduce<Derived::kLogSum>},
      {"ReduceLogSumExp", DerivedReduce<Derived::kLogSumExp>},
      {"ReduceMin", DerivedReduce<Derived::kMin>},
      {"ReduceSumSquare", DerivedReduce<Derived::kSumSquare>},
      {"Selu", ActivationOp<Activation::kSelu>},
      {"Size", Size},
      {"Softplus", ActivationOp<Activation::kSoftplus>},
      {"Softsign", ActivationOp<Activation::kSoftsign>},
      {"ThresholdedRelu", ActivationOp<Activation::kThresholdedRelu>},
      {"Trilu", Trilu},
      {"Mod", Mod},
      {"DepthToSpace", DepthSpace<true>},
      {"EyeLike", EyeLike},
      {"Shrink", Shrink},
      {"SpaceToDepth", DepthSpace<false>},
      {"Xor", LogicOp<Logic::kXor>},
  };
  table.insert(composite.begin(), composite.end());
}

}  // namespace dflow::onnx
