// Internal: softmax over the rows of a matrix, for the kernels that end in one (Softmax,
// _Attention).
#pragma once

#include <cstdint>

namespace dflow::cpu {

// y = softmax of each of the `rows` rows of c floats of x (x == y is fine), the row maximum
// subtracted first. `finite`: the caller knows the rows hold no NaN or infinity, and oneDNN's
// primitive runs (it loses them); otherwise a loop that keeps them as the formula does.
void SoftmaxRows(int64_t rows, int64_t c, const float* x, float* y, bool finite);

}  // namespace dflow::cpu
