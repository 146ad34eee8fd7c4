// How batch normalization sees its operands, in its definition, builders and every backend's
// kernels: x [N, C, ...] as [n, c, inner], with one scale, offset, mean and variance value per
// channel.
#pragma once

#include <vector>

#include "graph/tensor.h"

namespace dflow {

// Every axis of a rank-`rank` [N, C, ...] tensor but the channel axis 1: those a batch
// normalization reduces over.
inline std::vector<int64_t> NonChannelAxes(int rank) {
  std::vector<int64_t> axes = {0};
  for (int i = 2; i < rank; ++i) axes.push_back(i);
  return axes;
}

// x viewed as [n, c, inner].
struct BatchNormDims {
  int64_t n, c, inner;
  int64_t count() const { return n * inner; }  // elements per channel
  int64_t index(int64_t b, int64_t ch, int64_t i) const { return (b * c + ch) * inner + i; }
};

// InvalidArgument naming the shape unless x is [N, C, ...] of rank 2 to 5.
inline Result<BatchNormDims> BatchNormDimsOf(const Shape& x) {
  if (x.rank() < 2 || x.rank() > 5) {
    return InvalidArgument("input must be [N, C, ...] of rank 2 to 5, got {}", x);
  }
  BatchNormDims d{x[0], x[1], 1};
  for (int i = 2; i < x.rank(); ++i) d.inner *= x[i];
  return d;
}

// InvalidArgument naming `what` unless `t` is a vector of `channels` values of `dtype`.
inline Status CheckChannelVector(const Tensor& t, const char* what, int64_t channels, DType dtype) {
  if (t.shape().rank() != 1 || t.shape()[0] != channels) {
    return InvalidArgument("{} has shape {} but the input has {} channels", what, t.shape(),
                           channels);
  }
  if (t.dtype() != dtype) return InvalidArgument("{} is {}, the input {}", what, t.dtype(), dtype);
  return Status::OK();
}

}  // namespace dflow
