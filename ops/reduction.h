// The shapes of reductions, shared by every backend's kernels: which dimensions a reduction over
// `axes` folds, which ones SumToShapeOf folds to undo broadcasting, and the reduced shape.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/shape.h"
#include "graph/status.h"

namespace dflow {

// reduced[d] for each dimension of `in`: whether a reduction over `axes` (negative counts from
// the end; empty: all) folds it. InvalidArgument naming an axis out of range.
Result<std::vector<bool>> ReducedAxes(const Shape& in, const std::vector<int64_t>& axes);

// The dimensions of `in` (a broadcast's output) that summing down to `like` folds: the leading
// ones `like` lacks and those where `like` has 1. InvalidArgument when `like` does not broadcast
// to `in`.
Result<std::vector<bool>> SumToShapeAxes(const Shape& in, const Shape& like);

// `in` without its reduced dimensions, or with 1 in their place when `keep_dims`.
Shape ReducedShape(const Shape& in, const std::vector<bool>& reduced, bool keep_dims);

}  // namespace dflow
