// Cases for matrix products, reductions and the gradient helpers that undo them (SumToShapeOf,
// ReduceGrad), and AddN.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "op_cases.h"
#include "ops/array_ops.h"
#include "ops/grad_ops.h"
#include "ops/math_ops.h"

namespace dflow::conformance {
namespace {

// [batch..., M, N] = a [batch..., M, K] x b [batch..., K, N] after the transposes, with an
// optional bias over N and ReLU.
Tensor MatMulRef(const Tensor& a, const Tensor& b, bool ta, bool tb, const Tensor* bias = nullptr,
                 bool relu = false, bool gelu = false) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  int r = sa.rank();
  int64_t batch = 1;
  std::vector<int64_t> dims;
  for (int d = 0; d < r - 2; ++d) {
    batch *= sa[d];
    dims.push_back(sa[d]);
  }
  int64_t m = ta ? sa[r - 1] : sa[r - 2], k = ta ? sa[r - 2] : sa[r - 1];
  int64_t n = tb ? sb[r - 2] : sb[r - 1];
  dims.push_back(m);
  dims.push_back(n);
  std::vector<double> va = ToDoubles(a), vb = ToDoubles(b), out(batch * m * n);
  for (int64_t q = 0; q < batch; ++q) {
    const double* pa = va.data() + q * m * k;
    const double* pb = vb.data() + q * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = bias ? ElementAsDouble(*bias, j) : 0;
        for (int64_t p = 0; p < k; ++p) {
          acc += (ta ? pa[p * m + i] : pa[i * k + p]) * (tb ? pb[j * k + p] : pb[p * n + j]);
        }
        if (gelu) acc = 0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0)));
        out[(q * m + i) * n + j] = relu && acc < 0 ? 0 : acc;
      }
    }
  }
  return FromDoubles(a.dtype(), Shape(std::span<const int64_t>(dims)), out);
}

Shape Transposed(int64_t rows, int64_t cols, bool t, const std::vector<int64_t>& batch = {}) {
  std::vector<int64_t> d = batch;
  d.push_back(t ? cols : rows);
  d.push_back(t ? rows : cols);
  return Shape(std::span<const int64_t>(d));
}

std::string TransposeTag(bool ta, bool tb) {
  return std::string(ta ? "ta" : "") + (tb ? "tb" : "");
}

void AddMatMul(CaseRng& rng, std::vector<OpCase>& cases) {
  struct Dims {
    int64_t m, k, n;
    bool ta, tb;
    DType dt = DType::kF32;
  };
  std::vector<Dims> dims = {{1, 1, 1, false, false},   {33, 17, 9, true, true},
                            {3, 0, 4, false, false},   {0, 4, 3, false, true},
                            {2, 257, 3, false, false}, {7, 13, 5, true, false, DType::kF64}};
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) dims.push_back({7, 13, 5, ta, tb});
  }
  for (const auto& d : dims) {
    bool ta = d.ta, tb = d.tb;
    cases.push_back(OpCase{.op = "MatMul",
                           .tag = TransposeTag(ta, tb),
                           .inputs = {rng.Uniform(d.dt, Transposed(d.m, d.k, ta)),
                                      rng.Uniform(d.dt, Transposed(d.k, d.n, tb))},
                           .build = One([ta, tb](const Scope& s, const std::vector<Output>& in) {
                             return ops::MatMul(s, in[0], in[1],
                                                {.transpose_a = ta, .transpose_b = tb});
                           }),
                           .reference = One([ta, tb](const std::vector<Tensor>& in) {
                             return MatMulRef(in[0], in[1], ta, tb);
                           }),
                           .tolerance = d.k > 100 ? 4.0 : 1.0});
  }
  struct Batched {
    std::vector<int64_t> batch;
    int64_t m, k, n;
    bool ta, tb;
    DType dt = DType::kF32;
  };
  std::vector<Batched> batched = {{{2, 3}, 4, 5, 2, false, false},
                                  {{1}, 1, 1, 1, false, false},
                                  {{3}, 5, 7, 4, true, true, DType::kF64}};
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) batched.push_back({{3}, 5, 7, 4, ta, tb});
  }
  for (const auto& d : batched) {
    bool ta = d.ta, tb = d.tb;
    cases.push_back(OpCase{.op = "BatchMatMul",
                           .tag = TransposeTag(ta, tb),
                           .inputs = {rng.Uniform(d.dt, Transposed(d.m, d.k, ta, d.batch)),
                                      rng.Uniform(d.dt, Transposed(d.k, d.n, tb, d.batch))},
                           .build = One([ta, tb](const Scope& s, const std::vector<Output>& in) {
                             return ops::BatchMatMul(s, in[0], in[1],
                                                     {.transpose_a = ta, .transpose_b = tb});
                           }),
                           .reference = One([ta, tb](const std::vector<Tensor>& in) {
                             return MatMulRef(in[0], in[1], ta, tb);
                           })});
  }
  // The fused op exists only in compiled plans; the case adds it directly.
  struct Fused {
    int64_t m, k, n;
    bool ta;
    std::string act;
  };
  for (const auto& d : std::vector<Fused>{{7, 13, 5, false, "Relu"},
                                          {7, 13, 5, false, ""},
                                          {1, 1, 1, false, "Relu"},
                                          {33, 17, 9, true, "Relu"},
                                          {7, 13, 5, false, "Gelu"},
                                          {33, 17, 9, true, "Gelu"},
                                          {4, 0, 3, false, "Gelu"}}) {
    bool ta = d.ta;
    std::string act = d.act;
    cases.push_back(OpCase{
        .op = "_FusedMatMul",
        .tag = TransposeTag(ta, false) + (act == "Relu"   ? "relu"
                                          : act == "Gelu" ? "gelu"
                                                          : ""),
        .inputs = {rng.Uniform(DType::kF32, Transposed(d.m, d.k, ta)),
                   rng.Uniform(DType::kF32, Shape{d.k, d.n}), rng.Uniform(DType::kF32, Shape{d.n})},
        .build = One([ta, act](const Scope& s, const std::vector<Output>& in) {
          return s.OutputOf(
              s.AddNode("_FusedMatMul", {in[0], in[1], in[2]},
                        {{"transpose_a", ta}, {"transpose_b", false}, {"activation", act}}));
        }),
        .reference = One([ta, act](const std::vector<Tensor>& in) {
          return MatMulRef(in[0], in[1], ta, false, &in[2], act == "Relu", act == "Gelu");
        }),
        .no_gradient = "fused ops exist only in compiled plans (no grad_fn)"});
  }
  // _ScaledBatchMatMul: alpha * (a x b) + addend, the addend broadcast (an attention mask
  // [B, 1, 1, N], a row [N], the whole product), b transposed or not, and over k = 0.
  struct Scaled {
    int64_t k;
    bool tb;
    Shape addend;
  };
  for (const auto& d : std::vector<Scaled>{{5, true, Shape{2, 1, 1, 6}},
                                           {5, false, Shape{6}},
                                           {9, true, Shape{2, 3, 4, 6}},
                                           {1, false, Shape{3, 1, 6}},
                                           {0, true, Shape{2, 1, 1, 6}}}) {
    const bool tb = d.tb;
    cases.push_back(
        OpCase{.op = "_ScaledBatchMatMul",
               .tag = TransposeTag(false, tb),
               .inputs = {rng.Uniform(DType::kF32, Shape{2, 3, 4, d.k}),
                          rng.Uniform(DType::kF32, tb ? Shape{2, 3, 6, d.k} : Shape{2, 3, d.k, 6}),
                          rng.Uniform(DType::kF32, d.addend)},
               .build = One([tb](const Scope& s, const std::vector<Output>& in) {
                 return s.OutputOf(
                     s.AddNode("_ScaledBatchMatMul", {in[0], in[1], in[2]},
                               {{"transpose_a", false}, {"transpose_b", tb}, {"alpha", 0.125}}));
               }),
               .reference = One([tb](const std::vector<Tensor>& in) {
                 Tensor p = MatMulRef(in[0], in[1], false, tb);
                 std::vector<double> v = ToDoubles(p), add = ToDoubles(in[2]);
                 const Shape& y = p.shape();
                 const Shape& a = in[2].shape();
                 for (int64_t i = 0; i < y.num_elements(); ++i) {
                   // The addend's element for product element i: its index, dimension by dimension
                   // from the last, 0 where the addend has 1.
                   int64_t rest = i, at = 0, step = 1;
                   for (int dim = 1; dim <= y.rank(); ++dim) {
                     const int64_t index = rest % y[y.rank() - dim];
                     rest /= y[y.rank() - dim];
                     if (dim <= a.rank()) {
                       const int64_t size = a[a.rank() - dim];
                       at += (size == 1 ? 0 : index) * step;
                       step *= size;
                     }
                   }
                   v[i] = 0.125 * v[i] + add[at];
                 }
                 return FromDoubles(DType::kF32, y, v);
               }),
               .no_gradient = "fused ops exist only in compiled plans (no grad_fn)"});
  }
  // _MatMulAdd: addend + a x b, the sum added in the addend's buffer or a fresh one.
  for (const auto& d : std::vector<Fused>{{7, 13, 5, false, ""},
                                          {33, 17, 9, true, ""},
                                          {1, 1, 1, true, ""},
                                          {4, 0, 3, false, ""}}) {
    bool ta = d.ta;
    cases.push_back(
        OpCase{.op = "_MatMulAdd",
               .tag = TransposeTag(ta, false),
               .inputs = {rng.Uniform(DType::kF32, Shape{d.m, d.n}),
                          rng.Uniform(DType::kF32, Transposed(d.m, d.k, ta)),
                          rng.Uniform(DType::kF32, Shape{d.k, d.n})},
               .build = One([ta](const Scope& s, const std::vector<Output>& in) {
                 return s.OutputOf(s.AddNode("_MatMulAdd", {in[0], in[1], in[2]},
                                             {{"transpose_a", ta}, {"transpose_b", false}}));
               }),
               .reference = One([ta](const std::vector<Tensor>& in) {
                 std::vector<double> sum = ToDoubles(in[0]);
                 std::vector<double> product = ToDoubles(MatMulRef(in[1], in[2], ta, false));
                 for (size_t i = 0; i < sum.size(); ++i) sum[i] += product[i];
                 return FromDoubles(DType::kF32, in[0].shape(), sum);
               }),
               .no_gradient = "fused ops exist only in compiled plans (no grad_fn)"});
  }
}

// Where each element of a tensor of shape `s` goes when `axes` (empty: all) are reduced.
struct Reduction {
  Shape out;
  std::vector<int64_t> target;  // per input element, its output element
  int64_t count = 1;            // input elements per output element
};

Reduction Reduce(const Shape& s, std::vector<int64_t> axes, bool keep) {
  std::vector<bool> reduced(s.rank(), axes.empty());
  for (int64_t a : axes) reduced[a < 0 ? a + s.rank() : a] = true;
  Reduction r;
  std::vector<int64_t> kept, out_dims;
  for (int d = 0; d < s.rank(); ++d) {
    if (reduced[d]) {
      r.count *= s[d];
      if (keep) out_dims.push_back(1);
    } else {
      kept.push_back(s[d]);
      out_dims.push_back(s[d]);
    }
  }
  r.out = Shape(std::span<const int64_t>(out_dims));
  Shape kept_shape(std::span<const int64_t>{kept});
  r.target.resize(s.num_elements());
  for (int64_t i = 0; i < s.num_elements(); ++i) {
    std::vector<int64_t> c = Unravel(s, i), kc;
    for (int d = 0; d < s.rank(); ++d) {
      if (!reduced[d]) kc.push_back(c[d]);
    }
    r.target[i] = Ravel(kept_shape, kc);
  }
  return r;
}

enum class Mode { kSum, kMean, kMax, kProd };

Tensor ReduceRef(const Tensor& x, const std::vector<int64_t>& axes, bool keep, Mode mode) {
  Reduction r = Reduce(x.shape(), axes, keep);
  double init = mode == Mode::kMax    ? -std::numeric_limits<double>::infinity()
                : mode == Mode::kProd ? 1
                                      : 0;
  std::vector<double> acc(r.out.num_elements(), init);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    double v = ElementAsDouble(x, i);
    double& a = acc[r.target[i]];
    a = mode == Mode::kMax ? std::max(a, v) : mode == Mode::kProd ? a * v : a + v;
  }
  if (mode == Mode::kMean) {
    for (auto& a : acc) {
      a = IsInteger(x.dtype()) ? std::trunc(a / static_cast<double>(r.count))
                               : a / static_cast<double>(r.count);
    }
  }
  return FromDoubles(x.dtype(), r.out, acc);
}

struct ReduceSpec {
  DType dt;
  Shape shape;
  std::vector<int64_t> axes;
  bool keep;
};

std::string AxesTag(const std::vector<int64_t>& axes, bool keep) {
  std::string tag = "axes";
  for (int64_t a : axes) tag += fmt::format("{}{}", a < 0 ? "m" : "", a < 0 ? -a : a);
  return tag + (keep ? "keep" : "");
}

void AddReductions(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<ReduceSpec> common = {
      {DType::kF32, Shape{3, 4, 5}, {}, false},
      {DType::kF32, Shape{3, 4, 5}, {1}, true},
      {DType::kF32, Shape{3, 4, 5}, {0, 2}, false},
      {DType::kF32, Shape{3, 4, 5}, {-1}, true},
      {DType::kF32, Shape{257}, {}, false},
      {DType::kF32, Shape{7, 1, 33}, {1}, false},
      {DType::kF32, Shape{}, {}, true},
      {DType::kF64, Shape{2, 3, 4, 5}, {-1, 1}, false},
      {DType::kF32, Shape{2, 33, 2}, {0, 2}, true},
  };
  for (auto [op, mode] :
       {std::pair{"ReduceSum", Mode::kSum}, std::pair{"ReduceMean", Mode::kMean},
        std::pair{"ReduceMax", Mode::kMax}, std::pair{"ReduceProd", Mode::kProd}}) {
    std::vector<ReduceSpec> specs = common;
    specs.push_back({DType::kI32, Shape{6, 7}, {0}, false});
    specs.push_back({DType::kI64, Shape{6, 7}, {1}, true});
    if (mode != Mode::kMax) specs.push_back({DType::kF32, Shape{0, 3}, {0}, false});
    std::string name = op;
    for (const auto& spec : specs) {
      auto axes = spec.axes;
      bool keep = spec.keep;
      Mode m = mode;
      // Products of integers in [-3, 3] fit 32 bits; of floats near 1 in magnitude, a double.
      Tensor x = IsInteger(spec.dt) ? rng.Ints(spec.dt, spec.shape, mode == Mode::kProd ? -3 : -50,
                                               mode == Mode::kProd ? 3 : 50)
                 : mode == Mode::kMax  ? rng.Distinct(spec.dt, spec.shape)
                 : mode == Mode::kProd ? rng.Uniform(spec.dt, spec.shape, 0.7, 1.4)
                                       : rng.Uniform(spec.dt, spec.shape);
      cases.push_back(
          OpCase{.op = name,
                 .tag = AxesTag(axes, keep),
                 .inputs = {x},
                 .build = One([name, axes, keep](const Scope& s, const std::vector<Output>& in) {
                   ops::ReduceAttrs a{.keep_dims = keep};
                   if (name == "ReduceSum") return ops::ReduceSum(s, in[0], axes, a);
                   if (name == "ReduceMean") return ops::ReduceMean(s, in[0], axes, a);
                   if (name == "ReduceProd") return ops::ReduceProd(s, in[0], axes, a);
                   return ops::ReduceMax(s, in[0], axes, a);
                 }),
                 .reference = One([axes, keep, m](const std::vector<Tensor>& in) {
                   return ReduceRef(in[0], axes, keep, m);
                 }),
                 .tolerance = 2});
    }
  }
  // ReduceProd's gradient where a group holds one zero (the product of the rest flows to it) or
  // two (nothing flows): checked, as every case, against finite differences.
  cases.push_back(
      OpCase{.op = "ReduceProd",
             .tag = "zeros",
             .inputs = {Tensor::FromVector<double>({0, 2, 3, 0, 0, 4, 1, 2, 3}, Shape{3, 3})},
             .build = One([](const Scope& s, const std::vector<Output>& in) {
               return ops::ReduceProd(s, in[0], {1}, {});
             }),
             .reference = One([](const std::vector<Tensor>& in) {
               return ReduceRef(in[0], {1}, false, Mode::kProd);
             })});
  struct ArgSpec {
    Tensor x;
    int64_t axis;
  };
  std::vector<ArgSpec> args = {{rng.Distinct(DType::kF32, Shape{3, 4, 5}), 0},
                               {rng.Distinct(DType::kF32, Shape{3, 4, 5}), 1},
                               {rng.Distinct(DType::kF32, Shape{3, 4, 5}), -1},
                               {rng.Uniform(DType::kF32, Shape{257}), 0},
                               {rng.Uniform(DType::kF64, Shape{7, 1}), 1},
                               {rng.Ints(DType::kI32, Shape{4, 6}, -2, 2), 1},  // ties
                               {rng.Ints(DType::kI64, Shape{9, 2}, -2, 2), 0}};
  for (const auto& a : args) {
    int64_t axis = a.axis;
    cases.push_back(OpCase{.op = "ArgMax",
                           .tag = AxesTag({axis}, false),
                           .inputs = {a.x},
                           .build = One([axis](const Scope& s, const std::vector<Output>& in) {
                             return ops::ArgMax(s, in[0], axis);
                           }),
                           // The first maximum along the axis.
                           .reference = One([axis](const std::vector<Tensor>& in) {
                             const Tensor& x = in[0];
                             Reduction r = Reduce(x.shape(), {axis}, false);
                             std::vector<double> best(r.out.num_elements(),
                                                      -std::numeric_limits<double>::infinity());
                             std::vector<double> at(r.out.num_elements(), -1);
                             int d = axis < 0 ? axis + x.shape().rank() : axis;
                             for (int64_t i = 0; i < x.num_elements(); ++i) {
                               double v = ElementAsDouble(x, i);
                               int64_t o = r.target[i];
                               if (at[o] < 0 || v > best[o]) {
                                 best[o] = v;
                                 at[o] = static_cast<double>(Unravel(x.shape(), i)[d]);
                               }
                             }
                             return FromDoubles(DType::kI64, r.out, at);
                           }),
                           .no_gradient = "integer output"});
  }
}

void AddGradHelpers(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<std::pair<Shape, Shape>> sums = {{Shape{4, 3, 5}, Shape{3, 1}},
                                                     {Shape{2, 3}, Shape{}},
                                                     {Shape{5, 7}, Shape{5, 7}},
                                                     {Shape{3, 1, 4}, Shape{1, 4}},
                                                     {Shape{0, 3}, Shape{3}}};
  for (const auto& [x, like] : sums) {
    cases.push_back(OpCase{.op = "SumToShapeOf",
                           .inputs = {rng.Uniform(DType::kF32, x), rng.Uniform(DType::kF32, like)},
                           .build = One([](const Scope& s, const std::vector<Output>& in) {
                             return ops::SumToShapeOf(s, in[0], in[1]);
                           }),
                           .reference = One([](const std::vector<Tensor>& in) {
                             const Shape& xs = in[0].shape();
                             const Shape& ls = in[1].shape();
                             std::vector<double> acc(ls.num_elements(), 0);
                             for (int64_t i = 0; i < xs.num_elements(); ++i) {
                               acc[BroadcastIndex(ls, xs, i)] += ElementAsDouble(in[0], i);
                             }
                             return FromDoubles(in[0].dtype(), ls, acc);
                           }),
                           .grad_inputs = {0}});
  }
  const std::vector<std::tuple<Shape, std::vector<int64_t>, bool, bool>> grads = {
      {Shape{3, 4, 5}, {1}, false, false}, {Shape{3, 4, 5}, {0, 2}, true, true},
      {Shape{257}, {}, false, true},       {Shape{2, 3}, {-1}, true, false},
      {Shape{}, {}, false, false},
  };
  for (const auto& [xs, axes, keep, mean] : grads) {
    Reduction r = Reduce(xs, axes, keep);
    auto ax = axes;
    bool k = keep, m = mean;
    cases.push_back(
        OpCase{.op = "ReduceGrad",
               .tag = AxesTag(axes, keep) + (mean ? "mean" : "sum"),
               .inputs = {rng.Uniform(DType::kF32, r.out), rng.Uniform(DType::kF32, xs)},
               .build = One([ax, k, m](const Scope& s, const std::vector<Output>& in) {
                 return ops::ReduceGrad(s, in[0], in[1], ax, k, m);
               }),
               .reference = One([ax, k, m](const std::vector<Tensor>& in) {
                 Reduction red = Reduce(in[1].shape(), ax, k);
                 std::vector<double> v(in[1].num_elements());
                 for (size_t i = 0; i < v.size(); ++i) {
                   v[i] = ElementAsDouble(in[0], red.target[i]) / (m ? red.count : 1);
                 }
                 return FromDoubles(in[0].dtype(), in[1].shape(), v);
               }),
               .grad_inputs = {0}});
  }
  const std::vector<std::pair<DType, std::vector<Shape>>> addn = {
      {DType::kF32, {Shape{3, 4}}},
      {DType::kF32, {Shape{3, 4}, Shape{3, 4}, Shape{3, 4}}},
      {DType::kF32, {Shape{}, Shape{}}},
      {DType::kF32, {Shape{257}, Shape{257}, Shape{257}, Shape{257}}},
      {DType::kF32, {Shape{0, 2}, Shape{0, 2}}},
      {DType::kF64, {Shape{2, 5}, Shape{2, 5}}},
      {DType::kI32, {Shape{7}, Shape{7}, Shape{7}}},
  };
  for (const auto& [dt, shapes] : addn) {
    std::vector<Tensor> inputs;
    for (const auto& s : shapes) inputs.push_back(rng.Uniform(dt, s, -50, 50));
    cases.push_back(OpCase{.op = "AddN",
                           .inputs = inputs,
                           .build = One([](const Scope& s, const std::vector<Output>& in) {
                             return ops::AddN(s, in);
                           }),
                           .reference = One([](const std::vector<Tensor>& in) {
                             std::vector<double> acc(in[0].num_elements(), 0);
                             for (const auto& t : in) {
                               for (size_t i = 0; i < acc.size(); ++i)
                                 acc[i] += ElementAsDouble(t, i);
                             }
                             return FromDoubles(in[0].dtype(), in[0].shape(), acc);
                           })});
  }
}

}  // namespace

// CumSum along an axis fed as a scalar tensor, every combination of exclusive and reverse.
void AddCumSum(CaseRng& rng, std::vector<OpCase>& cases) {
  struct Spec {
    DType dt;
    Shape shape;
    int64_t axis;
  };
  for (const auto& [dt, shape, axis] : std::vector<Spec>{{DType::kF32, Shape{3, 5}, 1},
                                                         {DType::kF64, Shape{4, 2, 3}, -3},
                                                         {DType::kI32, Shape{7}, 0},
                                                         {DType::kF32, Shape{2, 0, 3}, 2}}) {
    for (int flags = 0; flags < 4; ++flags) {
      const bool exclusive = flags & 1, reverse = flags & 2;
      cases.push_back(
          OpCase{.op = "CumSum",
                 .tag = fmt::format("axis{}{}{}{}", axis < 0 ? "m" : "", std::abs(axis),
                                    exclusive ? "_exclusive" : "", reverse ? "_reverse" : ""),
                 .inputs = {IsInteger(dt) ? rng.Ints(dt, shape, -20, 20) : rng.Uniform(dt, shape),
                            Tensor::Scalar<int64_t>(axis)},
                 .build = One([exclusive, reverse](const Scope& s, const std::vector<Output>& in) {
                   return ops::CumSum(s, in[0], in[1], exclusive, reverse);
                 }),
                 .reference = One([exclusive, reverse](const std::vector<Tensor>& in) {
                   const Shape& xs = in[0].shape();
                   const int64_t a = static_cast<int64_t>(ElementAsDouble(in[1], 0));
                   const int d = static_cast<int>(a < 0 ? a + xs.rank() : a);
                   std::vector<double> v(xs.num_elements(), 0);
                   for (int64_t i = 0; i < xs.num_elements(); ++i) {
                     std::vector<int64_t> c = Unravel(xs, i);
                     const int64_t at = c[d];
                     for (int64_t k = 0; k < xs[d]; ++k) {
                       const bool before = reverse ? k > at : k < at;
                       if (before || (!exclusive && k == at)) {
                         c[d] = k;
                         v[i] += ElementAsDouble(in[0], Ravel(xs, c));
                       }
                     }
                   }
                   return FromDoubles(in[0].dtype(), xs, v);
                 }),
                 .grad_inputs = {0}});
    }
  }
}

void AddMathCases(CaseRng& rng, std::vector<OpCase>& cases) {
  AddMatMul(rng, cases);
  AddReductions(rng, cases);
  AddGradHelpers(rng, cases);
  AddCumSum(rng, cases);
}

}  // namespace dflow::conformance
