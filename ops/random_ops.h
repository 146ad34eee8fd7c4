// Builder functions for seeded random tensors. The same seed gives the same values on every
// run, so initialisation is reproducible.
#pragma once

#include <cstdint>

#include "graph/scope.h"

namespace dflow::ops {

Output RandomUniform(const Scope& scope, const Shape& shape, double minval, double maxval,
                     uint64_t seed, DType dtype = DType::kF32);
Output RandomNormal(const Scope& scope, const Shape& shape, double mean, double stddev,
                    uint64_t seed, DType dtype = DType::kF32);

// Uniform values in [0, 1) of x's shape (known at run time), drawn from MT19937 seeded with
// `seed` and read as NumPy's RandomState reads it (53-bit doubles from two draws): the first run
// gives np.random.seed(seed); np.random.uniform(0, 1, shape), the values ONNX's reference uses
// for a seeded Dropout; later runs of the same step (the same fetches, targets and feed shapes:
// one compiled plan) go on with the stream, another step's plan starts it from the seed again.
// f32 or f64 (`dtype`); stateful.
Output UniformLike(const Scope& scope, Output x, uint64_t seed, DType dtype = DType::kF64);

}  // namespace dflow::ops
