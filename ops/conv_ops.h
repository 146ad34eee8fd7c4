// Builder functions for convolution and pooling on NCHW tensors.
#pragma once

#include <vector>

#include "graph/scope.h"

namespace dflow::ops {

struct Conv2DAttrs {
  std::vector<int64_t> strides = {1, 1};
  std::vector<int64_t> pads = {0, 0, 0, 0};  // top, left, bottom, right
  std::vector<int64_t> dilations = {1, 1};
  int64_t groups = 1;
};
// x [N, C, H, W] * w [O, C / groups, KH, KW] -> [N, O, OH, OW]. f32 on oneDNN, f64 on loops.
Output Conv2D(const Scope& scope, Output x, Output w, const Conv2DAttrs& attrs = {});
// The gradients of Conv2D with respect to its input and its filter.
Output Conv2DBackpropInput(const Scope& scope, Output dy, Output w, Output x_like,
                           const Conv2DAttrs& attrs);
Output Conv2DBackpropFilter(const Scope& scope, Output x, Output dy, Output w_like,
                            const Conv2DAttrs& attrs);

struct PoolAttrs {
  std::vector<int64_t> ksize = {2, 2};
  std::vector<int64_t> strides = {2, 2};
  std::vector<int64_t> pads = {0, 0, 0, 0};  // top, left, bottom, right
};
Output MaxPool(const Scope& scope, Output x, const PoolAttrs& attrs = {});
// Averages over the window's elements inside the input (padding is not counted).
Output AvgPool(const Scope& scope, Output x, const PoolAttrs& attrs = {});
Output MaxPoolGrad(const Scope& scope, Output x, Output dy, const PoolAttrs& attrs);
Output AvgPoolGrad(const Scope& scope, Output x, Output dy, const PoolAttrs& attrs);
// Mean over H and W: [N, C, H, W] -> [N, C, 1, 1].
Output GlobalAvgPool(const Scope& scope, Output x);
// [N, d1, d2, ...] -> [N, d1 * d2 * ...]; the trailing dimensions must be known.
Output Flatten(const Scope& scope, Output x);

}  // namespace dflow::ops
