// Conformance cases of the indexing ops: Gather (with its gradient GatherGrad), GatherElements
// and ScatterElements, on random indices (negative ones too) against plain loops over the
// row-major coordinates.
#include <algorithm>
#include <map>
#include <numeric>

#include "op_cases.h"
#include "ops/index_ops.h"

namespace dflow::conformance {
namespace {

int64_t Wrap(double k, int64_t dim) {
  auto i = static_cast<int64_t>(k);
  return i < 0 ? i + dim : i;
}

Tensor GatherRef(const Tensor& x, const Tensor& idx, int64_t axis) {
  const Shape& xs = x.shape();
  std::vector<int64_t> dims(xs.dims().begin(), xs.dims().begin() + axis);
  for (int64_t d : idx.shape().dims()) dims.push_back(d);
  for (int d = static_cast<int>(axis) + 1; d < xs.rank(); ++d) dims.push_back(xs[d]);
  const Shape out(dims);
  std::vector<double> v(out.num_elements());
  const int ir = idx.shape().rank();
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    std::vector<int64_t> c = Unravel(out, i);
    std::vector<int64_t> ic(c.begin() + axis, c.begin() + axis + ir);
    std::vector<int64_t> xc(c.begin(), c.begin() + axis);
    xc.push_back(Wrap(ElementAsDouble(idx, Ravel(idx.shape(), ic)), xs[static_cast<int>(axis)]));
    xc.insert(xc.end(), c.begin() + axis + ir, c.end());
    v[i] = ElementAsDouble(x, Ravel(xs, xc));
  }
  return FromDoubles(x.dtype(), out, v);
}

// The coordinates in x that element i of the indices addresses.
std::vector<int64_t> ElementTarget(const Shape& xs, const Tensor& idx, int64_t axis, int64_t i) {
  std::vector<int64_t> c = Unravel(idx.shape(), i);
  c[axis] = Wrap(ElementAsDouble(idx, i), xs[static_cast<int>(axis)]);
  return c;
}

Tensor GatherElementsRef(const Tensor& x, const Tensor& idx, int64_t axis) {
  std::vector<double> v(idx.num_elements());
  for (int64_t i = 0; i < idx.num_elements(); ++i) {
    v[i] = ElementAsDouble(x, Ravel(x.shape(), ElementTarget(x.shape(), idx, axis, i)));
  }
  return FromDoubles(x.dtype(), idx.shape(), v);
}

Tensor ScatterElementsRef(const Tensor& x, const Tensor& idx, const Tensor& u, int64_t axis,
                          const std::string& reduction) {
  std::vector<double> v = ToDoubles(x);
  for (int64_t i = 0; i < idx.num_elements(); ++i) {
    double& y = v[Ravel(x.shape(), ElementTarget(x.shape(), idx, axis, i))];
    const double w = ElementAsDouble(u, i);
    y = reduction == "add" ? y + w : reduction == "mul" ? y * w : w;
  }
  return FromDoubles(x.dtype(), x.shape(), v);
}

// Indices of `shape` along `axis` of a dimension `dim`: each line along the axis a permutation
// prefix of 0..dim-1 (no position twice), half of them written as negative indices.
Tensor DistinctIndices(CaseRng& rng, DType dt, const Shape& shape, int64_t axis, int64_t dim) {
  std::vector<double> v(shape.num_elements());
  std::map<std::vector<int64_t>, std::vector<int64_t>> lines;  // a permutation per line
  for (int64_t i = 0; i < shape.num_elements(); ++i) {
    std::vector<int64_t> c = Unravel(shape, i);
    const int64_t along = c[axis];
    c[axis] = 0;
    auto [it, fresh] = lines.try_emplace(c, std::vector<int64_t>(dim));
    if (fresh) {
      std::iota(it->second.begin(), it->second.end(), 0);
      std::shuffle(it->second.begin(), it->second.end(), rng.gen());
    }
    const int64_t k = it->second[along];
    v[i] = (i % 2 == 1) ? static_cast<double>(k - dim) : static_cast<double>(k);
  }
  return FromDoubles(dt, shape, v);
}

void AddGather(CaseRng& rng, std::vector<OpCase>& cases) {
  struct Spec {
    DType dt, it;
    Shape x, idx;
    int64_t axis;
  };
  const std::vector<Spec> specs = {
      {DType::kF32, DType::kI64, Shape{10, 4}, Shape{6}, 0},  // an embedding lookup
      {DType::kF32, DType::kI32, Shape{3, 5, 2}, Shape{2, 3}, 1},
      {DType::kF64, DType::kI64, Shape{4, 6}, Shape{}, 1},
      {DType::kI64, DType::kI32, Shape{7}, Shape{3, 2}, 0},
      {DType::kF32, DType::kI64, Shape{3, 4}, Shape{0}, 0},
  };
  for (const auto& [dt, it, xs, is, axis] : specs) {
    const int64_t a = axis;
    const int64_t dim = xs[static_cast<int>(axis)];
    Tensor x = IsInteger(dt) ? rng.Ints(dt, xs, -50, 50) : rng.Uniform(dt, xs);
    cases.push_back(OpCase{.op = "Gather",
                           .tag = "axis" + std::to_string(axis),
                           .inputs = {x, rng.Ints(it, is, -dim, dim - 1)},
                           .build = One([a](const Scope& s, const std::vector<Output>& in) {
                             return ops::Gather(s, in[0], in[1], a);
                           }),
                           .reference = One([a](const std::vector<Tensor>& in) {
                             return GatherRef(in[0], in[1], a);
                           })});
  }
  // GatherGrad directly (its input gradient is Gather again): repeated indices add up.
  for (int64_t axis : {0, 1}) {
    const Shape xs{4, 3};
    const Shape is{5};
    Shape gs = axis == 0 ? Shape{5, 3} : Shape{4, 5};
    const int64_t a = axis;
    cases.push_back(
        OpCase{.op = "GatherGrad",
               .tag = "axis" + std::to_string(axis),
               .inputs = {rng.Uniform(DType::kF32, xs), rng.Ints(DType::kI64, is, -3, xs[axis] - 1),
                          rng.Uniform(DType::kF32, gs)},
               .build = One([a](const Scope& s, const std::vector<Output>& in) {
                 return ops::GatherGrad(s, in[0], in[1], in[2], a);
               }),
               .reference = One([a](const std::vector<Tensor>& in) {
                 const Shape& xs = in[0].shape();
                 std::vector<double> v(xs.num_elements(), 0);
                 for (int64_t i = 0; i < in[2].num_elements(); ++i) {
                   std::vector<int64_t> c = Unravel(in[2].shape(), i);
                   c[a] = Wrap(ElementAsDouble(in[1], c[a]), xs[static_cast<int>(a)]);
                   v[Ravel(xs, c)] += ElementAsDouble(in[2], i);
                 }
                 return FromDoubles(in[0].dtype(), xs, v);
               }),
               .grad_inputs = {2}});
  }
}

void AddGatherElements(CaseRng& rng, std::vector<OpCase>& cases) {
  struct Spec {
    DType dt, it;
    Shape x, idx;
    int64_t axis;
  };
  const std::vector<Spec> specs = {
      {DType::kF32, DType::kI64, Shape{3, 4}, Shape{3, 4}, 1},
      {DType::kF32, DType::kI32, Shape{3, 4}, Shape{5, 4}, 0},         // more rows than x
      {DType::kF64, DType::kI64, Shape{2, 5, 3}, Shape{2, 1, 3}, 1},   // a loss's target pick
      {DType::kF32, DType::kI64, Shape{4, 3, 2}, Shape{3, 2, 2}, -1},  // smaller off the axis
      {DType::kI32, DType::kI64, Shape{6}, Shape{9}, 0},
      {DType::kBool, DType::kI32, Shape{2, 3}, Shape{2, 2}, 1},
      {DType::kF32, DType::kI64, Shape{3, 2}, Shape{0, 2}, 0},
  };
  for (const auto& [dt, it, xs, is, axis] : specs) {
    const int64_t a = axis;
    const int64_t ax = axis < 0 ? axis + xs.rank() : axis;
    const int64_t dim = xs[static_cast<int>(ax)];
    Tensor x = dt == DType::kBool ? rng.Bools(xs)
               : IsInteger(dt)    ? rng.Ints(dt, xs, -50, 50)
                                  : rng.Uniform(dt, xs);
    cases.push_back(OpCase{.op = "GatherElements",
                           .tag = "axis" + std::to_string(ax),
                           .inputs = {x, rng.Ints(it, is, -dim, dim - 1)},
                           .build = One([a](const Scope& s, const std::vector<Output>& in) {
                             return ops::GatherElements(s, in[0], in[1], a);
                           }),
                           .reference = One([ax](const std::vector<Tensor>& in) {
                             return GatherElementsRef(in[0], in[1], ax);
                           })});
  }
}

void AddScatterElements(CaseRng& rng, std::vector<OpCase>& cases) {
  struct Spec {
    DType dt;
    Shape x, idx;
    int64_t axis;
    std::string reduction;
  };
  const std::vector<Spec> specs = {
      {DType::kF32, Shape{3, 4}, Shape{3, 2}, 1, "none"},
      {DType::kF64, Shape{4, 3}, Shape{3, 3}, 0, "none"},
      {DType::kF32, Shape{2, 3, 4}, Shape{2, 3, 5}, 2, "add"},  // repeated positions add up
      {DType::kI64, Shape{5}, Shape{7}, 0, "add"},
      {DType::kF32, Shape{3, 3}, Shape{3, 2}, 1, "mul"},
      {DType::kU8, Shape{2, 4}, Shape{2, 3}, 1, "none"},
  };
  for (const auto& [dt, xs, is, axis, reduction] : specs) {
    const int64_t a = axis;
    const std::string r = reduction;
    const int64_t dim = xs[static_cast<int>(axis)];
    // "none" writes each position at most once (which write wins is otherwise unspecified).
    Tensor idx = r == "none" ? DistinctIndices(rng, DType::kI64, is, axis, dim)
                             : rng.Ints(DType::kI32, is, -dim, dim - 1);
    const DType type = dt;  // a plain copy: lambdas cannot capture bindings on clang 14
    auto values = [&rng, type](const Shape& s) {
      return type == DType::kU8 ? rng.Ints(type, s, 0, 200)
             : IsInteger(type)  ? rng.Ints(type, s, -50, 50)
                                : rng.Uniform(type, s);
    };
    Tensor x = values(xs);
    Tensor u = values(is);
    cases.push_back(OpCase{.op = "ScatterElements",
                           .tag = r + "_axis" + std::to_string(axis),
                           .inputs = {x, idx, u},
                           .build = One([a, r](const Scope& s, const std::vector<Output>& in) {
                             return ops::ScatterElements(s, in[0], in[1], in[2], a, r);
                           }),
                           .reference = One([a, r](const std::vector<Tensor>& in) {
                             return ScatterElementsRef(in[0], in[1], in[2], a, r);
                           }),
                           .no_gradient = r == "mul" ? "reduction 'mul' has no gradient" : ""});
  }
}

}  // namespace

void AddIndexCases(CaseRng& rng, std::vector<OpCase>& cases) {
  AddGather(rng, cases);
  AddGatherElements(rng, cases);
  AddScatterElements(rng, cases);
}

}  // namespace dflow::conformance
