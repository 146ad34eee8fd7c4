// Builder functions for the helper ops that gradient functions use: they undo broadcasting,
// reductions and reshapes with shapes known only at run time, and compute activation gradients.
#pragma once

#include <vector>

#include "graph/scope.h"

namespace dflow::ops {

// Sums x over the dimensions along which `like` was broadcast, giving like's shape.
Output SumToShapeOf(const Scope& scope, Output x, Output like);
// x with like's shape (same element count).
Output ReshapeLike(const Scope& scope, Output x, Output like);
// The gradient of ReduceSum/ReduceMean(x, axes, keep_dims): g spread back over x's shape.
Output ReduceGrad(const Scope& scope, Output g, Output x, const std::vector<int64_t>& axes,
                  bool keep_dims, bool mean);
// g where x > 0, else 0.
Output ReluGrad(const Scope& scope, Output g, Output x);
Output LeakyReluGrad(const Scope& scope, Output g, Output x, double alpha);
Output GeluGrad(const Scope& scope, Output g, Output x);
// A scalar of `dtype` (a floating or integer type) holding `value`.
Output ScalarConst(const Scope& scope, DType dtype, double value);

}  // namespace dflow::ops
