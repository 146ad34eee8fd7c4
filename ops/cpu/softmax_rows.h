// Internal: an attention's masked softmax over the rows of its scores (_Attention).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/shape.h"

namespace dflow::cpu {

// x (of shape `y`) = softmax over the last axis of x + add, where add's dimensions `add_dims`
// (y's rank) are y's or 1 where it broadcasts. A row whose sums are all finite takes one
// vectorised pass per step (the row maximum subtracted; each probability within 2e-6 of the
// exact one, or 1e-9 absolute; terms below e^-87 of the maximum counted as 0); a row with a NaN
// or an infinity takes the Softmax kernel's loop, so NaN and infinities come out as the unfused
// ops give them. Threads split the rows.
void MaskedSoftmaxRows(const float* add, const std::vector<int64_t>& add_dims, const Shape& y,
                       float* x);

}  // namespace dflow::cpu
