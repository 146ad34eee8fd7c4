// Internal: out += addend broadcast to out, measuring the sums' largest magnitude on the way
// (the bound a Softmax after it reads: runtime/tensor's known_bound).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/shape.h"

namespace dflow::cpu {

// out (of shape `y`) += add, whose dimensions `add_dims` (y's rank) are y's or 1 where it
// broadcasts; returns the largest magnitude of the sums (+infinity when one is NaN or infinite).
// Threads split the rows.
float AddBroadcastBounded(const float* add, const std::vector<int64_t>& add_dims, const Shape& y,
                          float* out);

}  // namespace dflow::cpu
