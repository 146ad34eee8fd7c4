#include "ops/matmul_shape.h"

#include <vector>

namespace dflow {

Result<MatMulDims> MatMulShapes(const Shape& as, const Shape& bs, bool ta, bool tb) {
  const int rank = as.rank();
  if (rank < 2 || bs.rank() != rank) {
    return InvalidArgument("inputs must be matrices or batches of them of one rank, got {} and {}",
                           as, bs);
  }
  MatMulDims d;
  std::vector<int64_t> dims;
  for (int i = 0; i < rank - 2; ++i) {
    if (as[i] != bs[i]) return InvalidArgument("batch dimensions differ: {} and {}", as, bs);
    dims.push_back(as[i]);
    d.batch *= as[i];
  }
  d.m = as[rank - (ta ? 1 : 2)];
  d.k = as[rank - (ta ? 2 : 1)];
  const int64_t kb = bs[rank - (tb ? 1 : 2)];
  d.n = bs[rank - (tb ? 2 : 1)];
  if (d.k != kb) {
    return InvalidArgument("inner dimensions differ: {}{} x {}{} ({} vs {})", as, ta ? "^T" : "",
                           bs, tb ? "^T" : "", d.k, kb);
  }
  dims.push_back(d.m);
  dims.push_back(d.n);
  d.out = Shape(dims);
  return d;
}

}  // namespace dflow
