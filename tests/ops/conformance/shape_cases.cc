// Conformance cases of the ops whose output shape comes from tensor values at run time: Shape,
// ReshapeTo (with the 0 and -1 of ONNX's Reshape) and Range, against plain loops.
#include <cmath>

#include "op_cases.h"
#include "ops/shape_ops.h"

namespace dflow::conformance {

void AddShapeCases(CaseRng& rng, std::vector<OpCase>& cases) {
  for (const Shape& s : {Shape{3, 4, 2}, Shape{}, Shape{0, 5}}) {
    cases.push_back(OpCase{.op = "Shape",
                           .inputs = {rng.Uniform(DType::kF32, s)},
                           .build = One([](const Scope& sc, const std::vector<Output>& in) {
                             return ops::ShapeOf(sc, in[0]);
                           }),
                           .reference = One([](const std::vector<Tensor>& in) {
                             const Shape& x = in[0].shape();
                             return Tensor::FromVector<int64_t>(x.dim_vector(), Shape{x.rank()});
                           }),
                           .no_gradient = "reads only the shape"});
  }
  struct Reshape {
    Shape x;
    std::vector<int64_t> to;  // as fed
    bool allow_zero;
    Shape want;
  };
  const std::vector<Reshape> reshapes = {
      {Shape{2, 3, 4}, {0, -1}, false, Shape{2, 12}},  // 0 copies dimension 0
      {Shape{2, 3, 4}, {4, 0, 2}, false, Shape{4, 3, 2}},
      {Shape{6, 2}, {-1}, false, Shape{12}},
      {Shape{0, 3}, {3, 0}, true, Shape{3, 0}},  // allow_zero: 0 is a dimension
      {Shape{1}, {}, false, Shape{}},
  };
  for (const auto& [xs, to, zero, want] : reshapes) {
    const bool z = zero;
    const Shape w = want;
    cases.push_back(
        OpCase{.op = "ReshapeTo",
               .tag = zero ? "allow_zero" : "",
               .inputs = {rng.Uniform(DType::kF32, xs),
                          Tensor::FromVector<int64_t>(to, Shape{static_cast<int64_t>(to.size())})},
               .build = One([z](const Scope& sc, const std::vector<Output>& in) {
                 return ops::ReshapeTo(sc, in[0], in[1], z);
               }),
               .reference = One([w](const std::vector<Tensor>& in) {
                 return FromDoubles(in[0].dtype(), w, ToDoubles(in[0]));
               }),
               .grad_inputs = {0}});
  }
  struct RangeSpec {
    DType dt;
    double start, limit, delta;
  };
  for (const auto& [dt, start, limit, delta] :
       std::vector<RangeSpec>{{DType::kI32, 1, 10, 3},
                              {DType::kI64, 10, -3, -4},
                              {DType::kF32, 0.5, 2.0, 0.25},
                              {DType::kF64, 1, 1, 1},     // empty
                              {DType::kI32, 5, 1, 2}}) {  // empty: limit behind start
    cases.push_back(
        OpCase{.op = "Range",
               .inputs = {FromDoubles(dt, Shape{}, {start}), FromDoubles(dt, Shape{}, {limit}),
                          FromDoubles(dt, Shape{}, {delta})},
               .build = One([](const Scope& sc, const std::vector<Output>& in) {
                 return ops::Range(sc, in[0], in[1], in[2]);
               }),
               .reference = One([](const std::vector<Tensor>& in) {
                 const double a = ElementAsDouble(in[0], 0), b = ElementAsDouble(in[1], 0),
                              d = ElementAsDouble(in[2], 0);
                 std::vector<double> v;
                 for (double x = a; d > 0 ? x < b : x > b; x += d) v.push_back(x);
                 return FromDoubles(in[0].dtype(), Shape{static_cast<int64_t>(v.size())}, v);
               }),
               .no_gradient = "a sequence of its scalars' values, not differentiated"});
  }
}

}  // namespace dflow::conformance
