// NumPy broadcasting: the output shape of an element-wise op on two shapes, shared by shape
// functions (which may see unknown dimensions) and kernels (which see concrete ones).
#pragma once

#include "graph/shape.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace dflow {

// The broadcast shape of `a` and `b`; -1 where it is known only at run time. InvalidArgument
// when two known dimensions differ and neither is 1.
Result<Shape> BroadcastShape(const Shape& a, const Shape& b);

// The output shape of a binary element-wise kernel on `a` and `b` (every backend's): their
// broadcast shape. InvalidArgument when their dtypes differ or their shapes do not broadcast.
Result<Shape> BinaryOutputShape(const Tensor& a, const Tensor& b);

// Row-major element strides of `in` as seen from `out`'s index space: 0 on broadcast
// dimensions. REQUIRES: in broadcasts to out (both concrete).
void BroadcastStrides(const Shape& in, const Shape& out, int64_t* strides);

}  // namespace dflow
