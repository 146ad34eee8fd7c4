// Internal to onnx/: what the converters share (onnx_ops.cc, composite_ops.cc): axes checked
// against a rank, Reshape targets, scalars of an output's dtype.
#pragma once

#include <algorithm>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "graph/scope.h"
#include "graph/status.h"
#include "onnx/node_context.h"
#include "ops/array_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/shape_ops.h"
#include "ops/unary_ops.h"

namespace dflow::onnx {

// `axis` in [-rank, rank) made non-negative; Unimplemented when the rank is unknown.
inline Result<int64_t> Axis(int64_t axis, int rank, const char* what = "axis") {
  if (rank < 0) return Unimplemented("{} needs an input of known rank", what);
  if (axis < -rank || axis >= rank) {
    return InvalidArgument("{} {} is outside [{}, {})", what, axis, -rank, rank);
  }
  return axis < 0 ? axis + rank : axis;
}

// A shape for ops::Reshape from dims where -1 marks unknown ones: Unimplemented when more than
// one is unknown (Reshape infers one).
inline Result<std::vector<int64_t>> ReshapeTarget(const std::vector<int64_t>& dims) {
  if (std::count(dims.begin(), dims.end(), -1) > 1) {
    return Unimplemented("the result has more than one dimension unknown at import ({})",
                         Shape(std::span<const int64_t>(dims)));
  }
  return dims;
}

// x reshaped to `dims`, where a dimension unknown at import (-1) is dimension from[i] of
// `source` (x when not given) at run time (from[i] < 0: inferred from the element count). At
// most one unknown: a Reshape; more: the shape is assembled as the graph runs (Shape, Slice,
// Concat into ReshapeTo).
inline Output ReshapeKeeping(const Scope& s, Output x, const std::vector<int64_t>& dims,
                             const std::vector<int>& from_x, Output source = Output()) {
  if (std::count(dims.begin(), dims.end(), -1) <= 1) return ops::Reshape(s, x, dims);
  Output shape = ops::ShapeOf(s, source.valid() ? source : x);
  std::vector<Output> parts;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 && from_x[i] >= 0) {
      parts.push_back(ops::Slice(s, shape, {from_x[i]}, {1}));
    } else {
      parts.push_back(ops::Const(s, std::vector<int64_t>{dims[i]}, Shape{1}));
    }
  }
  return ops::ReshapeTo(s, x, ops::Concat(s, parts, 0), /*allow_zero=*/true, dims);
}

// The dtype dflow's arithmetic kernels (f32, f64, i32, i64) compute a `dtype` value in: uint8 in
// int32, float16 and bfloat16 in float32; the others as they are.
inline DType ComputeDType(DType dtype) {
  if (dtype == DType::kU8) return DType::kI32;
  if (dtype == DType::kF16 || dtype == DType::kBF16) return DType::kF32;
  return dtype;
}

// x in ComputeDType(x's dtype) (a Cast when that differs).
inline Output Widened(const Scope& s, Output x) {
  const DType to = ComputeDType(x.dtype());
  return to == x.dtype() ? x : ops::Cast(s, x, to);
}

// y, computed in a wider dtype, back in `dtype` (uint8 wraps modulo 256, as ONNX's does).
inline Output Narrowed(const Scope& s, Output y, DType dtype) {
  return y.dtype() == dtype || y.dtype() == DType::kBool ? y : ops::Cast(s, y, dtype);
}

// A tensor of `dtype` and the shape held in `shape` (an i64 vector, known at run time), every
// element `value`: a Range as long as the shape's element count, made `value`, reshaped.
Output FilledOfShape(const Scope& s, Output shape, DType dtype, double value);

// x sliced along its axes by ONNX Slice's operands held in tensors (starts, ends, and axes and
// steps when valid; of one known length), with ONNX's clamping: one Gather of a Range of
// indices per dimension of x, its start, end and step picked from the operands as the graph
// runs. For operands known only at run time.
Result<Output> SliceAtRunTime(const Scope& s, Output x, Output starts, Output ends, Output axes,
                              Output steps);

// A scalar constant of like's dtype (f32 for any other).
inline Output ScalarLike(const Scope& s, Output like, double v) {
  switch (like.dtype()) {
    case DType::kF64:
      return ops::Const(s, v);
    case DType::kI32:
      return ops::Const(s, static_cast<int32_t>(v));
    case DType::kI64:
      return ops::Const(s, static_cast<int64_t>(v));
    default:
      return ops::Const(s, static_cast<float>(v));
  }
}

// |x|; NaN stays NaN.
inline Output AbsOf(const Scope& s, Output x) { return ops::Abs(s, x); }

// The axes of the reductions: all of them when none are given.
inline Result<std::vector<int64_t>> AllAxesIfEmpty(std::vector<int64_t> axes, const Shape& shape) {
  if (!axes.empty()) return axes;
  if (shape.unknown_rank()) return Unimplemented("reducing all axes of unknown rank");
  axes.resize(shape.rank());
  std::iota(axes.begin(), axes.end(), 0);
  return axes;
}

// Adds the converters of the ONNX ops made of other dflow ops (composite_ops.cc) to `table`.
void AddCompositeConverters(std::map<std::string, Converter>& table);
// Adds the converters of the indexing ops and the losses built on them (gather_ops.cc).
void AddGatherConverters(std::map<std::string, Converter>& table);
// Adds the converters of convolution, pooling, resizing and batch norm (window_ops.cc).
void AddWindowConverters(std::map<std::string, Converter>& table);

}  // namespace dflow::onnx
