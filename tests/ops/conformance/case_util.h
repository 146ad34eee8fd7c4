// Helpers for writing op conformance cases: random inputs from a seeded generator, element
// access in double precision whatever the dtype, and the index arithmetic (row-major
// coordinates, NumPy broadcasting) that plain-loop references need.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "graph/tensor.h"

namespace dflow::conformance {

// Element i of a host tensor of any numeric or bool dtype, as a double.
double ElementAsDouble(const Tensor& t, int64_t i);
std::vector<double> ToDoubles(const Tensor& t);
// A tensor of `dtype` holding `values` (rounded to the dtype; bool: non-zero is true).
Tensor FromDoubles(DType dtype, const Shape& shape, const std::vector<double>& values);
// A copy of `t` converted to `dtype`.
Tensor CastTo(const Tensor& t, DType dtype);

// Row-major coordinates of flat index `i` in `s`, and back.
std::vector<int64_t> Unravel(const Shape& s, int64_t i);
int64_t Ravel(const Shape& s, const std::vector<int64_t>& coords);
// The flat index in `in` of the element that flat index `out_index` of `out` reads when `in`
// broadcasts to `out` (NumPy rules: trailing dimensions align, size-1 dimensions repeat).
int64_t BroadcastIndex(const Shape& in, const Shape& out, int64_t out_index);
// The NumPy broadcast of two concrete shapes. REQUIRES: they broadcast.
Shape Broadcast(const Shape& a, const Shape& b);

// Random case inputs. One generator, seeded once, feeds the whole case table, so the table is
// the same in every run and on every device.
class CaseRng {
 public:
  explicit CaseRng(uint32_t seed) : gen_(seed) {}

  // Uniform in [lo, hi), with magnitude at least `min_abs` (keeps values away from the kinks
  // of Relu and Maximum and from zero divisors). Integer dtypes round toward zero.
  Tensor Uniform(DType dtype, const Shape& shape, double lo = -2, double hi = 2,
                 double min_abs = 0.1);
  // Integers in [lo, hi] stored in `dtype` (floats too: exact values make ties and equality).
  Tensor Ints(DType dtype, const Shape& shape, int64_t lo, int64_t hi);
  Tensor Bools(const Shape& shape);
  // Pairwise distinct values (a shuffled grid with jitter) in about [-2, 2]: no ties for max
  // and argmax, and gaps wide enough for finite differences.
  Tensor Distinct(DType dtype, const Shape& shape);
  std::mt19937& gen() { return gen_; }

 private:
  std::mt19937 gen_;
};

}  // namespace dflow::conformance
