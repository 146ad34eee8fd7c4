// Conformance cases of the ops whose output shape comes from tensor values at run time: Shape,
// ReshapeTo (with the 0 and -1 of ONNX's Reshape), Range, AxesShape, ReduceSumAxes and Resize,
// against plain loops.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "op_cases.h"
#include "ops/image_ops.h"
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
                               {DType::kI64, Shape{3, 5}, {}, true, false},       // every axis
                               {DType::kF32, Shape{3, 5}, {}, false, true},       // none: x
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
  // Resize against direct formulas over the whole output (not axis by axis, as the kernel
  // works): nearest, bilinear, cubic (the Keys kernel by distance) and a crop that extrapolates.
  auto f32 = [](std::vector<float> v) {
    return Tensor::FromVector<float>(v, Shape{static_cast<int64_t>(v.size())});
  };
  auto i64 = [](std::vector<int64_t> v) {
    return Tensor::FromVector<int64_t>(v, Shape{static_cast<int64_t>(v.size())});
  };
  auto resize_case = [&](const std::string& tag, Tensor x, Tensor roi, Tensor scales, Tensor sizes,
                         ops::ResizeAttrs attrs,
                         std::function<double(const std::vector<double>&, const Shape&,
                                              const std::vector<int64_t>&)>
                             at,
                         Shape out) {
    cases.push_back(
        OpCase{.op = "Resize",
               .tag = tag,
               .inputs = {std::move(x), std::move(roi), std::move(scales), std::move(sizes)},
               .build = One([attrs](const Scope& sc, const std::vector<Output>& in) {
                 return ops::Resize(sc, in[0], in[1], in[2], in[3], attrs);
               }),
               .reference = One([at, out](const std::vector<Tensor>& in) {
                 const std::vector<double> v = ToDoubles(in[0]);
                 std::vector<double> y;
                 std::vector<int64_t> index(out.rank(), 0);
                 for (int64_t k = 0; k < out.num_elements(); ++k) {
                   int64_t rest = k;
                   for (int d = out.rank() - 1; d >= 0; --d) {
                     index[d] = rest % out[d];
                     rest /= out[d];
                   }
                   y.push_back(at(v, in[0].shape(), index));
                 }
                 return FromDoubles(in[0].dtype(), out, y);
               }),
               .tolerance = 4,
               .grad_inputs = {0}});
  };
  auto elem = [](const std::vector<double>& v, const Shape& s, int64_t i, int64_t j) {
    return v[i * s[1] + j];
  };
  // Nearest, asymmetric, rounding down: y[i][j] = x[floor(i / 2)][floor(j / 1.5)].
  resize_case(
      "nearest_floor", rng.Uniform(DType::kF32, Shape{2, 4}), f32({}), f32({2, 1.5f}), i64({}),
      {.mode = "nearest", .coordinate_transformation_mode = "asymmetric", .nearest_mode = "floor"},
      [&](const std::vector<double>& v, const Shape& s, const std::vector<int64_t>& o) {
        return elem(v, s, o[0] / 2, static_cast<int64_t>(std::floor(o[1] / 1.5)));
      },
      Shape{4, 6});
  // Bilinear, half_pixel, to sizes [5, 7] from [3, 4]: the four corners around each sample
  // point, the edges repeated beyond the input.
  resize_case(
      "bilinear", rng.Uniform(DType::kF32, Shape{3, 4}), f32({}), f32({}), i64({5, 7}),
      {.mode = "linear"},
      [&](const std::vector<double>& v, const Shape& s, const std::vector<int64_t>& o) {
        const double yi = (o[0] + 0.5) * 3 / 5 - 0.5, xj = (o[1] + 0.5) * 4 / 7 - 0.5;
        const double fy = std::floor(yi), fx = std::floor(xj);
        auto at = [&](double i, double j) {
          return elem(v, s, std::clamp<int64_t>(static_cast<int64_t>(i), 0, 2),
                      std::clamp<int64_t>(static_cast<int64_t>(j), 0, 3));
        };
        const double ry = yi - fy, rx = xj - fx;
        return (1 - ry) * ((1 - rx) * at(fy, fx) + rx * at(fy, fx + 1)) +
               ry * ((1 - rx) * at(fy + 1, fx) + rx * at(fy + 1, fx + 1));
      },
      Shape{5, 7});
  // Cubic, align_corners, [1, 5] to [1, 8]: weights from the Keys kernel of each tap's distance.
  resize_case(
      "cubic_align_corners", rng.Uniform(DType::kF32, Shape{1, 5}), f32({}), f32({}), i64({1, 8}),
      {.mode = "cubic", .coordinate_transformation_mode = "align_corners"},
      [&](const std::vector<double>& v, const Shape& s, const std::vector<int64_t>& o) {
        const double a = -0.75, xj = o[1] * 4.0 / 7.0;
        double sum = 0;
        for (int64_t t = static_cast<int64_t>(std::floor(xj)) - 1;
             t <= static_cast<int64_t>(std::floor(xj)) + 2; ++t) {
          const double d = std::abs(xj - t);
          const double w = d <= 1  ? ((a + 2) * d - (a + 3)) * d * d + 1
                           : d < 2 ? ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
                                   : 0;
          sum += w * elem(v, s, 0, std::clamp<int64_t>(t, 0, 4));
        }
        return sum;
      },
      Shape{1, 8});
  // A crop reaching past the input: linear inside, the extrapolation value outside.
  resize_case(
      "crop_extrapolate", rng.Uniform(DType::kF32, Shape{1, 4}), f32({0, -0.5f, 1, 1.5f}), f32({}),
      i64({1, 5}),
      {.mode = "linear",
       .coordinate_transformation_mode = "tf_crop_and_resize",
       .extrapolation_value = 10},
      [&](const std::vector<double>& v, const Shape& s, const std::vector<int64_t>& o) {
        const double xj = -0.5 * 3 + o[1] * 2.0 * 3 / 4;
        if (xj < 0 || xj > 3) return 10.0;
        const double f = std::floor(xj), r = xj - f;
        const auto i = static_cast<int64_t>(f);
        return (1 - r) * elem(v, s, 0, i) + r * elem(v, s, 0, std::min<int64_t>(i + 1, 3));
      },
      Shape{1, 5});
}

}  // namespace dflow::conformance
