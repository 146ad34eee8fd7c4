#include "ops/broadcast.h"

#include <algorithm>

namespace dflow {

Result<Shape> BroadcastShape(const Shape& a, const Shape& b) {
  if (a.unknown_rank() || b.unknown_rank()) return Shape::Unknown();
  int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(rank);
  for (int i = 0; i < rank; ++i) {
    int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da == 1) {
      dims[i] = db;
    } else if (db == 1) {
      dims[i] = da;
    } else if (da < 0 || db < 0) {
      dims[i] = std::max(da, db);  // the known one, or -1 when both are unknown
    } else if (da != db) {
      return InvalidArgument("shapes {} and {} do not broadcast (dimension {}: {} vs {})", a, b, i,
                             da, db);
    } else {
      dims[i] = da;
    }
  }
  return Shape(dims);
}

void BroadcastStrides(const Shape& in, const Shape& out, int64_t* strides) {
  int offset = out.rank() - in.rank();
  int64_t stride = 1;
  for (int i = out.rank() - 1; i >= 0; --i) {
    int j = i - offset;
    if (j < 0 || in[j] == 1) {
      strides[i] = 0;
    } else {
      strides[i] = stride;
    }
    if (j >= 0) stride *= in[j];
  }
}

Result<Shape> BinaryOutputShape(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    return InvalidArgument("dtypes differ: {} vs {}", a.dtype(), b.dtype());
  }
  return BroadcastShape(a.shape(), b.shape());
}

}  // namespace dflow
