// Builder functions for the ops whose output shape comes from tensor values at run time: a
// tensor's shape as a tensor, a reshape to a shape held in a tensor, and Range. With them a graph
// whose dimensions are known only at run time (an imported model with a dynamic batch or
// sequence length) computes its shapes as it runs; and the axis operations whose axes come as a
// tensor (ONNX's Unsqueeze, Squeeze and ReduceSum take them as an input). They read their shape
// and axes operands on the host: CPU kernels only.
#pragma once

#include <string>
#include <vector>

#include "graph/scope.h"

namespace dflow::ops {

// The dimensions of x as an i64 vector of x's rank.
Output ShapeOf(const Scope& scope, Output x);

// x's data with the shape held in `shape` (an i32 or i64 vector): -1 infers one dimension from
// the element count; 0 copies x's dimension at the same index, unless `allow_zero` (then it is
// a dimension of 0). Shares x's buffer. `known`, when given, holds the dimensions known before
// the run (-1 where unknown): the output's static shape, checked when the graph runs.
Output ReshapeTo(const Scope& scope, Output x, Output shape, bool allow_zero = false,
                 const std::vector<int64_t>& known = {});

// The 1-D sequence start, start + delta, ... up to limit (excluded), from three scalars of one
// numeric dtype; empty when limit is not beyond start in delta's direction. delta 0 fails.
Output Range(const Scope& scope, Output start, Output limit, Output delta);

// The shape an axis operation gives a tensor of shape `shape` (an i64 vector), for `axes` held in
// an i32 or i64 vector (negative ones count from the end; no axis twice), by `mode`:
//   "unsqueeze": a 1 inserted at every axis (of the result's rank);
//   "squeeze": the axes, each of dimension 1, removed (no axes: every dimension of 1);
//   "reduce": the axes made 1, as a reduction keeping its dimensions leaves them (no axes:
//             every one, or none with `noop_with_empty_axes`).
// InvalidArgument naming the axis for one out of range, repeated, or (squeeze) not of 1.
Output AxesShape(const Scope& scope, Output shape, Output axes, const std::string& mode,
                 bool noop_with_empty_axes = false);

// The sum of x over the axes held in `axes` (an i32 or i64 vector, negative ones from the end),
// keeping them as dimensions of 1 or not. No axes: over every one, or none (x unchanged) with
// `noop_with_empty_axes`. f32, f64, i32 and i64; floats summed in double.
Output ReduceSumAxes(const Scope& scope, Output x, Output axes, bool keep_dims = true,
                     bool noop_with_empty_axes = false);

}  // namespace dflow::ops
