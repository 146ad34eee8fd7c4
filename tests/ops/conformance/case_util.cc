#include "case_util.h"

#include <algorithm>
#include <numeric>

namespace dflow::conformance {

double ElementAsDouble(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kF64:
      return t.data<double>()[i];
    case DType::kI32:
      return t.data<int32_t>()[i];
    case DType::kI64:
      return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kU8:
      return t.data<uint8_t>()[i];
    case DType::kBool:
      return t.data<bool>()[i] ? 1 : 0;
    default:
      DFLOW_CHECK(false && "dtype without a conformance reference");
      return 0;
  }
}

std::vector<double> ToDoubles(const Tensor& t) {
  std::vector<double> v(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = ElementAsDouble(t, i);
  return v;
}

Tensor FromDoubles(DType dtype, const Shape& shape, const std::vector<double>& values) {
  Tensor t(dtype, shape);
  DFLOW_CHECK(static_cast<int64_t>(values.size()) == t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double v = values[i];
    switch (dtype) {
      case DType::kF32:
        t.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::kF64:
        t.data<double>()[i] = v;
        break;
      case DType::kI32:
        t.data<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      case DType::kI64:
        t.data<int64_t>()[i] = static_cast<int64_t>(v);
        break;
      case DType::kU8:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
        break;
      case DType::kBool:
        t.data<bool>()[i] = v != 0;
        break;
      default:
        DFLOW_CHECK(false && "dtype without a conformance reference");
    }
  }
  return t;
}

Tensor CastTo(const Tensor& t, DType dtype) { return FromDoubles(dtype, t.shape(), ToDoubles(t)); }

std::vector<int64_t> Unravel(const Shape& s, int64_t i) {
  std::vector<int64_t> c(s.rank());
  for (int d = s.rank() - 1; d >= 0; --d) {
    c[d] = i % s[d];
    i /= s[d];
  }
  return c;
}

int64_t Ravel(const Shape& s, const std::vector<int64_t>& coords) {
  int64_t i = 0;
  for (int d = 0; d < s.rank(); ++d) i = i * s[d] + coords[d];
  return i;
}

int64_t BroadcastIndex(const Shape& in, const Shape& out, int64_t out_index) {
  std::vector<int64_t> oc = Unravel(out, out_index);
  std::vector<int64_t> ic(in.rank());
  int offset = out.rank() - in.rank();
  for (int d = 0; d < in.rank(); ++d) ic[d] = in[d] == 1 ? 0 : oc[d + offset];
  return Ravel(in, ic);
}

Shape Broadcast(const Shape& a, const Shape& b) {
  int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(rank);
  for (int d = 0; d < rank; ++d) {
    int da = d - (rank - a.rank()), db = d - (rank - b.rank());
    int64_t x = da >= 0 ? a[da] : 1, y = db >= 0 ? b[db] : 1;
    DFLOW_CHECK(x == y || x == 1 || y == 1);
    dims[d] = x == 1 ? y : x;
  }
  return Shape(std::span<const int64_t>(dims));
}

Tensor CaseRng::Uniform(DType dtype, const Shape& shape, double lo, double hi, double min_abs) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(shape.num_elements());
  for (auto& x : v) {
    do {
      x = dist(gen_);
    } while (std::abs(x) < min_abs);
  }
  return FromDoubles(dtype, shape, v);
}

Tensor CaseRng::Ints(DType dtype, const Shape& shape, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  std::vector<double> v(shape.num_elements());
  for (auto& x : v) x = static_cast<double>(dist(gen_));
  return FromDoubles(dtype, shape, v);
}

Tensor CaseRng::Bools(const Shape& shape) { return Ints(DType::kBool, shape, 0, 1); }

Tensor CaseRng::Distinct(DType dtype, const Shape& shape) {
  int64_t n = shape.num_elements();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), gen_);
  std::uniform_real_distribution<double> jitter(0.1, 0.4);
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = (static_cast<double>(order[i]) + jitter(gen_)) * 4.0 / std::max<int64_t>(n, 1) - 2.0;
  }
  return FromDoubles(dtype, shape, v);
}

}  // namespace dflow::conformance
