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

}  // namespace dflow::ops
