// Builder functions for the ops whose output shape comes from tensor values at run time: a
// tensor's shape as a tensor, a reshape to a shape held in a tensor, and Range. With them a graph
// whose dimensions are known only at run time (an imported model with a dynamic batch or
// sequence length) computes its shapes as it runs. They read their shape operands on the host:
// CPU kernels only.
#pragma once

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

}  // namespace dflow::ops
