// Internal: an addend broadcast over the rows of a tensor (the attention's mask over its
// scores), added row by row; and that sum over a whole tensor with its bound measured (the
// bound a Softmax after it reads: runtime/tensor's known_bound).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/shape.h"

namespace dflow::cpu {

// How an addend whose dimensions `add_dims` (y's rank) are y's or 1 where it broadcasts lines up
// with each row of y (its last axis).
class BroadcastRows {
 public:
  BroadcastRows(const std::vector<int64_t>& add_dims, const Shape& y);
  // dst, row `row` of y, += the addend's values for that row.
  void AddTo(const float* add, int64_t row, float* dst) const;

 private:
  Shape y_;
  std::vector<int64_t> stride_;  // the addend's stride along each of y's dimensions
};

// out (of shape `y`) += add broadcast as BroadcastRows lines it up; returns the largest
// magnitude of the sums (+infinity when one is NaN or infinite). Threads split the rows.
float AddBroadcastBounded(const float* add, const std::vector<int64_t>& add_dims, const Shape& y,
                          float* out);

}  // namespace dflow::cpu
