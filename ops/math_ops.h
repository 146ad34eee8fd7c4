// Builder functions for the math ops: element-wise arithmetic with NumPy broadcasting, Relu,
// MatMul, BiasAdd and reductions.
#pragma once

#include <vector>

#include "graph/scope.h"

namespace dflow::ops {

Output Add(const Scope& scope, Output a, Output b);
Output Sub(const Scope& scope, Output a, Output b);
Output Mul(const Scope& scope, Output a, Output b);
// Integer division by zero is an InvalidArgument at run time.
Output Div(const Scope& scope, Output a, Output b);
Output Maximum(const Scope& scope, Output a, Output b);
Output Minimum(const Scope& scope, Output a, Output b);
// a ** b; floating-point types only.
Output Pow(const Scope& scope, Output a, Output b);
Output Relu(const Scope& scope, Output x);

struct MatMulAttrs {
  bool transpose_a = false;
  bool transpose_b = false;
};
// a [M,K] x b [K,N] -> [M,N] (after the transposes); f32 on oneDNN's matmul primitive, f64 on
// a plain blocked loop (for double-precision gradient checks).
Output MatMul(const Scope& scope, Output a, Output b, const MatMulAttrs& attrs = {});
// a [..., M, K] x b [..., K, N] -> [..., M, N] per batch (leading dimensions equal, rank >= 3);
// f32 on oneDNN's batched matmul, f64 on loops.
Output BatchMatMul(const Scope& scope, Output a, Output b, const MatMulAttrs& attrs = {});
// x [..., C] + bias [C].
Output BiasAdd(const Scope& scope, Output x, Output bias);

struct ReduceAttrs {
  bool keep_dims = false;
};
// Sums over `axes` (negative counts from the end; empty: all axes).
Output ReduceSum(const Scope& scope, Output x, const std::vector<int64_t>& axes = {},
                 const ReduceAttrs& attrs = {});
Output ReduceMean(const Scope& scope, Output x, const std::vector<int64_t>& axes = {},
                  const ReduceAttrs& attrs = {});
// The gradient is shared equally among the elements that reach the maximum.
Output ReduceMax(const Scope& scope, Output x, const std::vector<int64_t>& axes = {},
                 const ReduceAttrs& attrs = {});
// The product over `axes` (1 over none); no gradient yet.
Output ReduceProd(const Scope& scope, Output x, const std::vector<int64_t>& axes = {},
                  const ReduceAttrs& attrs = {});
// Running sums along the axis given by the scalar `axis` (i32 or i64, read on the host when the
// graph runs; negative counts from the end): y[i] = x[0] + ... + x[i], or without x[i]
// (`exclusive`), or from the end (`reverse`).
Output CumSum(const Scope& scope, Output x, Output axis, bool exclusive = false,
              bool reverse = false);
// Index (i64) of the largest element along `axis`, the first on ties; no gradient.
Output ArgMax(const Scope& scope, Output x, int64_t axis);

}  // namespace dflow::ops
