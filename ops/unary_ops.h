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
// |x|, and the sign of x (-1, 0 or 1; NaN stays NaN).
Output Abs(const Scope& scope, Output x);
Output Sign(const Scope& scope, Output x);
// Rounding to an integral value: down, up, and to the nearest (halves to even, as ONNX's Round).
Output Floor(const Scope& scope, Output x);
Output Ceil(const Scope& scope, Output x);
Output Round(const Scope& scope, Output x);
// The trigonometric and hyperbolic functions and their inverses, and the error function.
Output Sin(const Scope& scope, Output x);
Output Cos(const Scope& scope, Output x);
Output Tan(const Scope& scope, Output x);
Output Asin(const Scope& scope, Output x);
Output Acos(const Scope& scope, Output x);
Output Atan(const Scope& scope, Output x);
Output Sinh(const Scope& scope, Output x);
Output Cosh(const Scope& scope, Output x);
Output Asinh(const Scope& scope, Output x);
Output Acosh(const Scope& scope, Output x);
Output Atanh(const Scope& scope, Output x);
Output Erf(const Scope& scope, Output x);
// Converts between f32, f64, i32, i64, u8 and bool (non-zero is true).
Output Cast(const Scope& scope, Output x, DType dtype);

}  // namespace dflow::ops
