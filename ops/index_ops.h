// Builder functions for the ops that read or write a tensor at positions given by an index
// tensor: Gather (whole slices along an axis, as an embedding lookup), GatherElements and
// ScatterElements (element by element along an axis). Indices are i32 or i64; a negative index
// counts from the end of the axis; one outside [-dim, dim) fails the run naming the node.
#pragma once

#include <string>

#include "graph/scope.h"

namespace dflow::ops {

// out[p, i..., q] = x[p, indices[i...], q] where p runs over the dimensions before `axis` and q
// over those after it: the output's shape is x's with dimension `axis` replaced by indices'.
Output Gather(const Scope& scope, Output x, Output indices, int64_t axis = 0);

// out has indices' shape (of x's rank, each dimension but `axis` at most x's):
// out[i] = x[i with dimension `axis` replaced by indices[i]].
Output GatherElements(const Scope& scope, Output x, Output indices, int64_t axis = 0);

// A copy of x in which each element of `updates` (of indices' shape) is written at the position
// GatherElements would read it from. reduction "none" replaces (the last write wins where
// indices repeat), "add" adds, "mul" multiplies.
Output ScatterElements(const Scope& scope, Output x, Output indices, Output updates,
                       int64_t axis = 0, const std::string& reduction = "none");

// Gather's gradient: zeros of `like`'s shape into which the slices of `grad` are added at the
// positions Gather read them from.
Output GatherGrad(const Scope& scope, Output like, Output indices, Output grad, int64_t axis);

}  // namespace dflow::ops
