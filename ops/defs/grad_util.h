// Internal helpers for gradient functions.
#pragma once

#include "graph/gradients.h"
#include "ops/grad_ops.h"

namespace dflow::ops::internal {

// True when input i of a two-input broadcasting op has the output's shape in every run: each of
// its known dimensions equals the output's, and each unknown one meets a 1 (or nothing) in the
// other input. Its gradient then needs no reduction, and the backward graph does not read x.
inline bool KeepsBroadcastShape(const GradContext& ctx, int i) {
  if (ctx.num_inputs() != 2) return false;
  const Shape& x = ctx.input(i).shape();
  const Shape& other = ctx.input(1 - i).shape();
  const Shape& y = ctx.output(0).shape();
  if (x.unknown_rank() || other.unknown_rank() || y.unknown_rank() || x.rank() != y.rank()) {
    return false;
  }
  int offset = x.rank() - other.rank();  // other's dimensions align with x's last ones
  if (offset < 0) return false;
  for (int d = 0; d < x.rank(); ++d) {
    if (x[d] >= 0) {
      if (x[d] != y[d]) return false;
    } else if (d >= offset && other[d - offset] != 1) {
      return false;
    }
  }
  return true;
}

// g reduced to the shape of forward input i (undoing broadcasting); g itself when the static
// shapes already agree.
inline Output Unbroadcast(const GradContext& ctx, Output g, int i) {
  Output x = ctx.input(i);
  if (g.shape().fully_defined() && g.shape() == x.shape()) return g;
  if (KeepsBroadcastShape(ctx, i)) return g;
  return SumToShapeOf(ctx.scope(), g, x);
}

// A scalar of x's dtype.
inline Output ScalarLike(const GradContext& ctx, Output x, double v) {
  return ScalarConst(ctx.scope(), x.dtype(), v);
}

}  // namespace dflow::ops::internal
