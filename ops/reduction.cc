#include "ops/reduction.h"

namespace dflow {

Result<std::vector<bool>> ReducedAxes(const Shape& in, const std::vector<int64_t>& axes) {
  int rank = in.rank();
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) return InvalidArgument("axis {} is out of range for {}", a, in);
    reduced[a < 0 ? a + rank : a] = true;
  }
  return reduced;
}

Result<std::vector<bool>> SumToShapeAxes(const Shape& in, const Shape& like) {
  if (like.rank() > in.rank()) {
    return InvalidArgument("cannot sum {} down to the larger rank of {}", in, like);
  }
  int offset = in.rank() - like.rank();
  std::vector<bool> reduced(in.rank());
  for (int d = 0; d < in.rank(); ++d) {
    int j = d - offset;
    if (j >= 0 && like[j] != 1 && like[j] != in[d]) {
      return InvalidArgument("{} does not broadcast to {}", like, in);
    }
    reduced[d] = j < 0 || (like[j] == 1 && in[d] != 1);
  }
  return reduced;
}

Shape ReducedShape(const Shape& in, const std::vector<bool>& reduced, bool keep_dims) {
  std::vector<int64_t> dims;
  for (int i = 0; i < in.rank(); ++i) {
    if (!reduced[i]) {
      dims.push_back(in[i]);
    } else if (keep_dims) {
      dims.push_back(1);
    }
  }
  return Shape(dims);
}

}  // namespace dflow
