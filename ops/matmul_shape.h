// The shapes of a (batched) matrix product, shared by every backend's MatMul kernel: inputs of
// one rank >= 2 whose leading dimensions are equal batches, each product [m, k] x [k, n]
// (after the transposes).
#pragma once

#include <cstdint>

#include "graph/shape.h"
#include "graph/status.h"

namespace dflow {

struct MatMulDims {
  int64_t batch = 1;  // the product of the leading dimensions
  int64_t m = 0, k = 0, n = 0;
  Shape out;  // the batch dimensions, then [m, n]
};

// InvalidArgument naming both shapes when the ranks, batches or inner dimensions disagree.
Result<MatMulDims> MatMulShapes(const Shape& a, const Shape& b, bool transpose_a, bool transpose_b);

}  // namespace dflow
