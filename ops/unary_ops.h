// Builder functions for the element-wise unary ops, and Cast.
#pragma once

#include "graph/scope.h"

namespace dflow::ops {

Output Neg(const Scope& scope, Output x);
Output Exp(const Scope& scope, Output x);
Output Log(const Scope& scope, Output x);
Output Sqrt(const Scope& scope, Output x);
Output Rsqrt(const Scope& scope, Output x);
Output Square(const Scope& scope, Output x);
Output Sigmoid(const Scope& scope, Output x);
Output Tanh(const Scope& scope, Output x);
// x for x > 0, alpha * x otherwise.
Output LeakyRelu(const Scope& scope, Output x, double alpha = 0.2);
// x * Phi(x), with the exact normal CDF (erf).
Output Gelu(const Scope& scope, Output x);
// Converts between f32, f64, i32, i64, u8 and bool (non-zero is true).
Output Cast(const Scope& scope, Output x, DType dtype);

}  // namespace dflow::ops
