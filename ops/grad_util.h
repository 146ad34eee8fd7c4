// Internal helpers for gradient functions.
#pragma once

#include "graph/gradients.h"
#include "ops/grad_ops.h"

namespace dflow::ops::internal {

// g reduced to the shape of forward input i (undoing broadcasting); g itself when the static
// shapes already agree.
inline Output Unbroadcast(const GradContext& ctx, Output g, int i) {
  Output x = ctx.input(i);
  if (g.shape().fully_defined() && g.shape() == x.shape()) return g;
  return SumToShapeOf(ctx.scope(), g, x);
}

// A scalar of x's dtype.
inline Output ScalarLike(const GradContext& ctx, Output x, double v) {
  return ScalarConst(ctx.scope(), x.dtype(), v);
}

}  // namespace dflow::ops::internal
