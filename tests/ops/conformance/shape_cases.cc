// Conformance cases of the ops whose output shape comes from tensor values at run time: Shape,
// ReshapeTo (with the 0 and -1 of ONNX's Reshape), Range, AxesShape and ReduceSumAxes, against
// plain loops.
#include <fmt/format.h>

#include <cmath>
#include <string>

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
  struct AxesSpec {
    std::vector<int64_t> shape, axes;
    std::string mode;
    bool noop;
    std::vector<int64_t> want;
  };
  for (const auto& [dims, axes, mode, noop, want] : std::vector<AxesSpec>{
           {{3, 4}, {0, -1}, "unsqueeze", false, {1, 3, 4, 1}},
           {{3, 4}, {1}, "unsqueeze", false, {3, 1, 4}},
           {{1, 3, 1, 4}, {0, -2}, "squeeze", false, {3, 4}},
           {{1, 3, 1}, {}, "squeeze", false, {3}},  // no axes: every dimension of 1
           {{2, 3, 4}, {-1, 0}, "reduce", false, {1, 3, 1}},
           {{2, 3}, {}, "reduce", false, {1, 1}},
           {{2, 3}, {}, "reduce", true, {2, 3}}}) {
    const std::vector<int64_t> w = want;
    const std::string m = mode;
    const bool no = noop;
    cases.push_back(OpCase{
        .op = "AxesShape",
        .tag = mode + (noop ? "_noop" : ""),
        .inputs = {Tensor::FromVector<int64_t>(dims, Shape{static_cast<int64_t>(dims.size())}),
                   Tensor::FromVector<int64_t>(axes, Shape{static_cast<int64_t>(axes.size())})},
        .build = One([m, no](const Scope& sc, const std::vector<Output>& in) {
          return ops::AxesShape(sc, in[0], in[1], m, no);
        }),
        // The expected shape, written out by hand for each case.
        .reference = One([w](const std::vector<Tensor>&) {
          return Tensor::FromVector<int64_t>(w, Shape{static_cast<int64_t>(w.size())});
        }),
        .no_gradient = "a shape computed from shapes, not differentiated"});
  }
  struct ReduceSpec {
    DType dt;
    Shape x;
    std::vector<int64_t> axes;
    bool keep, noop;
  };
  for (const auto& [dt, xs, axes, keep, noop] :
       std::vector<ReduceSpec>{{DType::kF32, Shape{2, 3, 4}, {0, 2}, true, false},
                               {DType::kF64, Shape{2, 3, 4}, {-2}, false, false},
                               {DType::kI32, Shape{3, 5}, {1}, false, false},
                               {DType::kI64, Shape{3, 5}, {}, true, false},   // every axis
                               {DType::kF32, Shape{3, 5}, {}, false, true},   // none: x
                               {DType::kF32, Shape{0, 4}, {0}, false, false}}) {  // empty sums
    const bool k = keep, no = noop;
    const std::vector<int64_t> ax = axes;
    cases.push_back(OpCase{
        .op = "ReduceSumAxes",
        .tag = fmt::format("{}{}", keep ? "keep" : "drop", noop ? "_noop" : ""),
        .inputs = {rng.Uniform(dt, xs),
                   Tensor::FromVector<int64_t>(axes, Shape{static_cast<int64_t>(axes.size())})},
        .build = One([k, no](const Scope& sc, const std::vector<Output>& in) {
          return ops::ReduceSumAxes(sc, in[0], in[1], k, no);
        }),
        // Every element added into the output element its index maps to, in double.
        .reference = One([k, no, ax](const std::vector<Tensor>& in) {
          const Shape& x = in[0].shape();
          const int rank = x.rank();
          if (ax.empty() && no) return in[0];
          std::vector<bool> reduced(rank, ax.empty());
          for (int64_t a : ax) reduced[a < 0 ? a + rank : a] = true;
          std::vector<int64_t> out_dims;
          for (int d = 0; d < rank; ++d) {
            if (!reduced[d]) out_dims.push_back(x[d]);
            if (reduced[d] && k) out_dims.push_back(1);
          }
          const Shape out(out_dims);
          std::vector<double> sums(static_cast<size_t>(out.num_elements()), 0.0);
          const std::vector<double> v = ToDoubles(in[0]);
          for (int64_t i = 0; i < x.num_elements(); ++i) {
            int64_t rest = i, o = 0, scale = 1;
            for (int d = rank - 1; d >= 0; --d) {
              const int64_t id = rest % x[d];
              rest /= x[d];
              if (!reduced[d]) {
                o += id * scale;
                scale *= x[d];
              }
            }
            sums[o] += v[i];
          }
          return FromDoubles(in[0].dtype(), out, sums);
        }),
        .grad_inputs = {0},
        .no_gradient = IsFloatingPoint(dt) ? "" : "integers: checked on the float cases"});
  }
}

}  // namespace dflow::conformance
