// Cases for the ops that create, pass through or rearrange data: Placeholder, Const, Identity,
// Reshape, ReshapeLike, ZerosLike, OnesLike, ElementCount, Fill, CheckNumerics, Transpose, Slice,
// Pad, Concat, Split, WriteRows, _WriteRowsSum and OneHot.
#include <fmt/format.h>

#include <cstring>

#include "op_cases.h"
#include "ops/array_ops.h"
#include "ops/grad_ops.h"
#include "ops/manip_ops.h"

namespace dflow::conformance {
namespace {

Shape ShapeOf(const std::vector<int64_t>& dims) { return Shape(std::span<const int64_t>(dims)); }

std::string IntsTag(const std::vector<int64_t>& v) {
  std::string tag;
  for (int64_t x : v)
    tag += fmt::format("{}{}{}", tag.empty() ? "" : "_", x < 0 ? "m" : "", x < 0 ? -x : x);
  return tag;
}

void AddPassThrough(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<std::pair<DType, Shape>> shapes = {
      {DType::kF32, Shape{3, 7}}, {DType::kF32, Shape{}},        {DType::kF32, Shape{0, 5}},
      {DType::kF64, Shape{257}},  {DType::kI32, Shape{4}},       {DType::kBool, Shape{2, 3}},
      {DType::kU8, Shape{5}},     {DType::kI64, Shape{1, 1, 1}},
  };
  auto value = [&](DType dt, const Shape& s) {
    return dt == DType::kBool ? rng.Bools(s) : rng.Uniform(dt, s, 1, 100);
  };
  auto same = One([](const std::vector<Tensor>& in) { return in[0].Clone(); });
  for (const auto& [dt, s] : shapes) {
    // The placeholder itself is fetched: what was fed comes back.
    cases.push_back(
        OpCase{.op = "Placeholder",
               .inputs = {value(dt, s)},
               .build = One([](const Scope&, const std::vector<Output>& in) { return in[0]; }),
               .reference = same});
    cases.push_back(OpCase{.op = "Identity",
                           .inputs = {value(dt, s)},
                           .build = One([](const Scope& sc, const std::vector<Output>& in) {
                             return ops::Identity(sc, in[0]);
                           }),
                           .reference = same});
    Tensor stored = value(dt, s);
    cases.push_back(
        OpCase{.op = "Const",
               .tag = "const",
               .inputs = {},
               .build = One([stored](const Scope& sc, const std::vector<Output>&) {
                 return ops::Const(sc, stored);
               }),
               .reference = One([stored](const std::vector<Tensor>&) { return stored.Clone(); })});
    if (dt == DType::kBool || dt == DType::kU8) continue;
    cases.push_back(OpCase{.op = "ZerosLike",
                           .inputs = {value(dt, s)},
                           .build = One([](const Scope& sc, const std::vector<Output>& in) {
                             return ops::ZerosLike(sc, in[0]);
                           }),
                           .reference = One([](const std::vector<Tensor>& in) {
                             return FromDoubles(in[0].dtype(), in[0].shape(),
                                                std::vector<double>(in[0].num_elements(), 0));
                           }),
                           .no_gradient = "constant output"});
    cases.push_back(OpCase{.op = "OnesLike",
                           .inputs = {value(dt, s)},
                           .build = One([](const Scope& sc, const std::vector<Output>& in) {
                             return ops::OnesLike(sc, in[0]);
                           }),
                           .reference = One([](const std::vector<Tensor>& in) {
                             return FromDoubles(in[0].dtype(), in[0].shape(),
                                                std::vector<double>(in[0].num_elements(), 1));
                           }),
                           .no_gradient = "constant output"});
    // All elements, then along the first and last axes (a rank-0 input has only the first).
    for (const std::vector<int64_t>& axes :
         {std::vector<int64_t>{},
          s.rank() > 0 ? std::vector<int64_t>{0, -1} : std::vector<int64_t>{}}) {
      if (!axes.empty() && s.rank() == 1) continue;  // {0, -1} names one axis twice
      cases.push_back(OpCase{.op = "ElementCount",
                             .tag = axes.empty() ? "all" : "first_last",
                             .inputs = {value(dt, s)},
                             .build = One([axes](const Scope& sc, const std::vector<Output>& in) {
                               return ops::ElementCount(sc, in[0], axes);
                             }),
                             .reference = One([axes](const std::vector<Tensor>& in) {
                               const Shape& x = in[0].shape();
                               double n = axes.empty()
                                              ? static_cast<double>(x.num_elements())
                                              : static_cast<double>(x[0] * x[x.rank() - 1]);
                               return FromDoubles(in[0].dtype(), Shape{}, {n});
                             }),
                             .no_gradient = "constant output"});
      if (s.rank() == 0) break;
    }
    if (IsFloatingPoint(dt)) {
      cases.push_back(OpCase{.op = "CheckNumerics",
                             .inputs = {rng.Uniform(dt, s)},
                             .build = One([](const Scope& sc, const std::vector<Output>& in) {
                               return ops::CheckNumerics(sc, in[0], "conformance");
                             }),
                             .reference = same});
    }
  }
  for (const auto& [dt, s, v] :
       std::vector<std::tuple<DType, Shape, double>>{{DType::kF32, Shape{3, 7}, 2.5},
                                                     {DType::kF64, Shape{}, -1.25},
                                                     {DType::kI32, Shape{0, 4}, 7},
                                                     {DType::kI64, Shape{257}, -3},
                                                     {DType::kBool, Shape{2, 2}, 1},
                                                     {DType::kU8, Shape{5}, 200}}) {
    Shape shape = s;
    DType dtype = dt;
    double fill = v;
    cases.push_back(
        OpCase{.op = "Fill",
               .tag = std::string(DTypeName(dt)) + "_" + IntsTag(s.dim_vector()),
               .inputs = {},
               .build = One([shape, fill, dtype](const Scope& sc, const std::vector<Output>&) {
                 return ops::Fill(sc, shape, fill, dtype);
               }),
               .reference = One([shape, fill, dtype](const std::vector<Tensor>&) {
                 return FromDoubles(dtype, shape, std::vector<double>(shape.num_elements(), fill));
               })});
  }
}

void AddReshapes(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> reshapes = {
      {Shape{2, 6}, {3, -1}}, {Shape{257}, {257, 1}}, {Shape{}, {1, 1}},
      {Shape{4, 0}, {0, 7}},  {Shape{2, 3, 4}, {-1}},
  };
  for (const auto& [s, to] : reshapes) {
    auto target = to;
    cases.push_back(OpCase{.op = "Reshape",
                           .tag = IntsTag(to),
                           .inputs = {rng.Uniform(DType::kF32, s)},
                           .build = One([target](const Scope& sc, const std::vector<Output>& in) {
                             return ops::Reshape(sc, in[0], target);
                           }),
                           .reference = One([target](const std::vector<Tensor>& in) {
                             std::vector<int64_t> dims = target;
                             int64_t known = 1, unknown = -1;
                             for (size_t i = 0; i < dims.size(); ++i) {
                               if (dims[i] < 0) {
                                 unknown = static_cast<int64_t>(i);
                               } else {
                                 known *= dims[i];
                               }
                             }
                             if (unknown >= 0) dims[unknown] = in[0].num_elements() / known;
                             return FromDoubles(in[0].dtype(), ShapeOf(dims), ToDoubles(in[0]));
                           })});
  }
  cases.push_back(OpCase{.op = "Reshape",
                         .tag = "i64",
                         .inputs = {rng.Ints(DType::kI64, Shape{3, 4}, -9, 9)},
                         .build = One([](const Scope& sc, const std::vector<Output>& in) {
                           return ops::Reshape(sc, in[0], {4, 3});
                         }),
                         .reference = One([](const std::vector<Tensor>& in) {
                           return in[0].Reshaped(Shape{4, 3}).Clone();
                         })});
  for (const auto& [s, like] : std::vector<std::pair<Shape, Shape>>{
           {Shape{2, 6}, Shape{3, 4}}, {Shape{7}, Shape{7, 1}}, {Shape{1}, Shape{}}}) {
    cases.push_back(OpCase{.op = "ReshapeLike",
                           .inputs = {rng.Uniform(DType::kF32, s), rng.Uniform(DType::kF32, like)},
                           .build = One([](const Scope& sc, const std::vector<Output>& in) {
                             return ops::ReshapeLike(sc, in[0], in[1]);
                           }),
                           .reference = One([](const std::vector<Tensor>& in) {
                             return FromDoubles(in[0].dtype(), in[1].shape(), ToDoubles(in[0]));
                           }),
                           .grad_inputs = {0}});
  }
}

void AddTransposeSlicePad(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<std::tuple<DType, Shape, std::vector<int64_t>>> transposes = {
      {DType::kF32, Shape{3, 7}, {1, 0}},
      {DType::kF32, Shape{2, 3, 4}, {2, 0, 1}},
      {DType::kF32, Shape{2, 1, 3, 5}, {3, 1, 0, 2}},
      {DType::kF32, Shape{33, 9}, {1, 0}},
      {DType::kF32, Shape{0, 3}, {1, 0}},
      {DType::kF32, Shape{4}, {0}},
      {DType::kF64, Shape{2, 3, 4}, {0, 2, 1}},
      {DType::kI32, Shape{2, 3, 4}, {1, 2, 0}},
      {DType::kBool, Shape{3, 2}, {1, 0}},
  };
  for (const auto& [dt, s, perm] : transposes) {
    auto p = perm;
    cases.push_back(
        OpCase{.op = "Transpose",
               .tag = IntsTag(perm),
               .inputs = {dt == DType::kBool ? rng.Bools(s) : rng.Uniform(dt, s, -50, 50)},
               .build = One([p](const Scope& sc, const std::vector<Output>& in) {
                 return ops::Transpose(sc, in[0], p);
               }),
               .reference = One([p](const std::vector<Tensor>& in) {
                 const Shape& xs = in[0].shape();
                 std::vector<int64_t> od;
                 for (int64_t d : p) od.push_back(xs[static_cast<int>(d)]);
                 Shape os = ShapeOf(od);
                 std::vector<double> v(os.num_elements());
                 for (int64_t i = 0; i < os.num_elements(); ++i) {
                   std::vector<int64_t> oc = Unravel(os, i), ic(xs.rank());
                   for (size_t d = 0; d < p.size(); ++d) ic[p[d]] = oc[d];
                   v[i] = ElementAsDouble(in[0], Ravel(xs, ic));
                 }
                 return FromDoubles(in[0].dtype(), os, v);
               })});
  }
  const std::vector<std::tuple<DType, Shape, std::vector<int64_t>, std::vector<int64_t>>> slices = {
      {DType::kF32, Shape{5, 7}, {1, 2}, {3, 4}},
      {DType::kF32, Shape{5, 7}, {0, 3}, {-1, -1}},
      {DType::kF32, Shape{257}, {100}, {33}},
      {DType::kF32, Shape{2, 3, 4}, {1, 0, 1}, {1, 3, 2}},
      {DType::kF32, Shape{4, 3}, {2, 0}, {0, 3}},
      {DType::kF64, Shape{6}, {5}, {1}},
      {DType::kI64, Shape{3, 3}, {1, 1}, {2, 2}},
  };
  for (const auto& [dt, s, begin, size] : slices) {
    auto b = begin, z = size;
    cases.push_back(OpCase{.op = "Slice",
                           .tag = IntsTag(begin) + "_size_" + IntsTag(size),
                           .inputs = {rng.Uniform(dt, s, -50, 50)},
                           .build = One([b, z](const Scope& sc, const std::vector<Output>& in) {
                             return ops::Slice(sc, in[0], b, z);
                           }),
                           .reference = One([b, z](const std::vector<Tensor>& in) {
                             const Shape& xs = in[0].shape();
                             std::vector<int64_t> od;
                             for (int d = 0; d < xs.rank(); ++d)
                               od.push_back(z[d] < 0 ? xs[d] - b[d] : z[d]);
                             Shape os = ShapeOf(od);
                             std::vector<double> v(os.num_elements());
                             for (int64_t i = 0; i < os.num_elements(); ++i) {
                               std::vector<int64_t> c = Unravel(os, i);
                               for (int d = 0; d < xs.rank(); ++d) c[d] += b[d];
                               v[i] = ElementAsDouble(in[0], Ravel(xs, c));
                             }
                             return FromDoubles(in[0].dtype(), os, v);
                           })});
  }
  const std::vector<std::tuple<DType, Shape, std::vector<int64_t>, double>> pads = {
      {DType::kF32, Shape{3, 4}, {1, 2, 0, 3}, 0},
      {DType::kF32, Shape{5}, {2, 0}, -1.5},
      {DType::kF32, Shape{2, 1, 3}, {0, 0, 1, 1, 2, 0}, 0.5},
      {DType::kF32, Shape{0, 2}, {1, 1, 0, 0}, 3},
      {DType::kF64, Shape{2, 2}, {1, 1, 1, 1}, 0},
      {DType::kI32, Shape{3}, {0, 4}, 7},
  };
  for (const auto& [dt, s, paddings, value] : pads) {
    auto p = paddings;
    double fill = value;
    cases.push_back(OpCase{.op = "Pad",
                           .tag = IntsTag(paddings),
                           .inputs = {rng.Uniform(dt, s, -50, 50)},
                           .build = One([p, fill](const Scope& sc, const std::vector<Output>& in) {
                             return ops::Pad(sc, in[0], p, fill);
                           }),
                           .reference = One([p, fill](const std::vector<Tensor>& in) {
                             const Shape& xs = in[0].shape();
                             std::vector<int64_t> od;
                             for (int d = 0; d < xs.rank(); ++d)
                               od.push_back(xs[d] + p[2 * d] + p[2 * d + 1]);
                             Shape os = ShapeOf(od);
                             std::vector<double> v(os.num_elements(), fill);
                             for (int64_t i = 0; i < xs.num_elements(); ++i) {
                               std::vector<int64_t> c = Unravel(xs, i);
                               for (int d = 0; d < xs.rank(); ++d) c[d] += p[2 * d];
                               v[Ravel(os, c)] = ElementAsDouble(in[0], i);
                             }
                             return FromDoubles(in[0].dtype(), os, v);
                           })});
  }
}

// Concatenation of `parts` along `axis` (non-negative), by plain copying.
Tensor ConcatRef(const std::vector<Tensor>& parts, int axis) {
  std::vector<int64_t> od = parts[0].shape().dim_vector();
  od[axis] = 0;
  for (const auto& t : parts) od[axis] += t.shape()[axis];
  Shape os = ShapeOf(od);
  std::vector<double> v(os.num_elements());
  int64_t offset = 0;
  for (const auto& t : parts) {
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      std::vector<int64_t> c = Unravel(t.shape(), i);
      c[axis] += offset;
      v[Ravel(os, c)] = ElementAsDouble(t, i);
    }
    offset += t.shape()[axis];
  }
  return FromDoubles(parts[0].dtype(), os, v);
}

void AddConcatSplit(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<std::tuple<DType, std::vector<Shape>, int64_t>> concats = {
      {DType::kF32, {Shape{2, 3}, Shape{4, 3}}, 0},
      {DType::kF32, {Shape{2, 3}, Shape{2, 1}, Shape{2, 5}}, -1},
      {DType::kF32, {Shape{2, 0, 3}, Shape{2, 4, 3}, Shape{2, 1, 3}}, 1},
      {DType::kF32, {Shape{7}}, 0},
      {DType::kF32, {Shape{129}, Shape{128}}, 0},
      {DType::kF64, {Shape{1, 2}, Shape{1, 2}}, 0},
      {DType::kI32, {Shape{3, 1, 2}, Shape{3, 2, 2}}, 1},
      {DType::kBool, {Shape{2}, Shape{3}}, 0},
  };
  for (const auto& [dt, shapes, axis] : concats) {
    std::vector<Tensor> inputs;
    for (const auto& s : shapes) {
      inputs.push_back(dt == DType::kBool ? rng.Bools(s) : rng.Uniform(dt, s, -50, 50));
    }
    int64_t ax = axis;
    cases.push_back(OpCase{.op = "Concat",
                           .tag = "axis" + IntsTag({axis}),
                           .inputs = inputs,
                           .build = One([ax](const Scope& sc, const std::vector<Output>& in) {
                             return ops::Concat(sc, in, ax);
                           }),
                           .reference = One([ax](const std::vector<Tensor>& in) {
                             return ConcatRef(
                                 in, static_cast<int>(ax < 0 ? ax + in[0].shape().rank() : ax));
                           })});
  }
  // num_split > 0: equal pieces; otherwise `sizes` (SplitV).
  const std::vector<std::tuple<DType, Shape, int64_t, std::vector<int64_t>, int64_t>> splits = {
      {DType::kF32, Shape{6, 4}, 3, {}, 0},
      {DType::kF32, Shape{2, 9}, 3, {}, -1},
      {DType::kF32, Shape{7}, 1, {}, 0},
      {DType::kF32, Shape{2, 10, 3}, 0, {3, -1, 0, 2}, 1},
      {DType::kF32, Shape{257}, 0, {256, 1}, 0},
      {DType::kF64, Shape{4, 2}, 2, {}, 0},
      {DType::kI64, Shape{3, 5}, 0, {1, 4}, 1},
  };
  for (const auto& [dt, s, num, sizes, axis] : splits) {
    int64_t n = num, ax = axis;
    auto z = sizes;
    int pieces = static_cast<int>(num > 0 ? num : static_cast<int64_t>(sizes.size()));
    cases.push_back(
        OpCase{.op = "Split",
               .tag = fmt::format("{}{}_axis{}", num > 0 ? "n" : "sizes",
                                  num > 0 ? std::to_string(num) : IntsTag(sizes), IntsTag({axis})),
               .inputs = {rng.Uniform(dt, s, -50, 50)},
               .build =
                   [n, z, ax](const Scope& sc, const std::vector<Output>& in) {
                     return CaseGraph{
                         n > 0 ? ops::Split(sc, in[0], n, ax) : ops::SplitV(sc, in[0], z, ax), {}};
                   },
               .reference =
                   [pieces, z, ax](const std::vector<Tensor>& in) {
                     const Shape& xs = in[0].shape();
                     int a = static_cast<int>(ax < 0 ? ax + xs.rank() : ax);
                     std::vector<int64_t> sz = z;
                     if (sz.empty()) sz.assign(pieces, xs[a] / pieces);
                     int64_t known = 0;
                     for (int64_t v : sz) known += v < 0 ? 0 : v;
                     for (auto& v : sz) v = v < 0 ? xs[a] - known : v;
                     std::vector<Tensor> out;
                     int64_t begin = 0;
                     for (int64_t len : sz) {
                       std::vector<int64_t> od = xs.dim_vector();
                       od[a] = len;
                       Shape os = ShapeOf(od);
                       std::vector<double> v(os.num_elements());
                       for (int64_t i = 0; i < os.num_elements(); ++i) {
                         std::vector<int64_t> c = Unravel(os, i);
                         c[a] += begin;
                         v[i] = ElementAsDouble(in[0], Ravel(xs, c));
                       }
                       out.push_back(FromDoubles(in[0].dtype(), os, v));
                       begin += len;
                     }
                     return out;
                   }});
  }
}

void AddOneHot(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<std::tuple<DType, int64_t, int64_t, DType>> specs = {
      {DType::kI32, 7, 5, DType::kF32}, {DType::kI64, 33, 10, DType::kF32},
      {DType::kI32, 1, 1, DType::kF64}, {DType::kI64, 0, 4, DType::kF32},
      {DType::kI32, 9, 3, DType::kI32},
  };
  for (const auto& [it, n, depth, dt] : specs) {
    int64_t d = depth;
    DType out = dt;
    // Indices from -2 to depth + 1: those outside [0, depth) give rows of zeros.
    cases.push_back(
        OpCase{.op = "OneHot",
               .tag = "depth" + std::to_string(depth) + "_" + std::string(DTypeName(dt)),
               .inputs = {rng.Ints(it, Shape{n}, -2, depth + 1)},
               .build = One([d, out](const Scope& sc, const std::vector<Output>& in) {
                 return ops::OneHot(sc, in[0], d, out);
               }),
               .reference = One([d, out](const std::vector<Tensor>& in) {
                 int64_t rows = in[0].num_elements();
                 std::vector<double> v(rows * d, 0);
                 for (int64_t r = 0; r < rows; ++r) {
                   auto idx = static_cast<int64_t>(ElementAsDouble(in[0], r));
                   if (idx >= 0 && idx < d) v[r * d + idx] = 1;
                 }
                 return FromDoubles(out, Shape{rows, d}, v);
               }),
               .no_gradient = "integer input"});
  }
}

// WriteRows into a fed tensor (which it must copy first: the caller holds it), and a chain of
// them from an Empty (each writing into the one before's buffer) that fills every row.
void AddWriteRows(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<std::tuple<DType, Shape, Shape, int64_t>> into = {
      {DType::kF32, Shape{5, 3}, Shape{2, 3}, 1},
      {DType::kF64, Shape{4}, Shape{4}, 0},
      {DType::kI32, Shape{3, 2, 2}, Shape{1, 2, 2}, 2},
      {DType::kF32, Shape{3, 2}, Shape{0, 2}, 3},
  };
  for (const auto& [dt, xs, ys, offset] : into) {
    int64_t at = offset;
    cases.push_back(
        OpCase{.op = "WriteRows",
               .tag = fmt::format("at{}", offset),
               .inputs = {rng.Uniform(dt, xs, -50, 50), rng.Uniform(dt, ys, -50, 50)},
               .build = One([at](const Scope& sc, const std::vector<Output>& in) {
                 return ops::WriteRows(sc, in[0], in[1], at);
               }),
               .reference = One([at](const std::vector<Tensor>& in) {
                 Tensor out = in[0].Clone();
                 const size_t row = in[0].shape()[0] > 0 ? in[0].num_bytes() / in[0].shape()[0] : 0;
                 for (size_t b = 0; b < in[1].num_bytes(); ++b) {
                   static_cast<char*>(out.raw_data())[at * row + b] =
                       static_cast<const char*>(in[1].raw_data())[b];
                 }
                 return out;
               }),
               .no_gradient = "WriteRows has no gradient: it assembles all-reduce results"});
  }
  for (DType dt : {DType::kF32, DType::kI64}) {
    cases.push_back(OpCase{
        .op = "WriteRows",
        .tag = "chain",
        .inputs = {rng.Uniform(dt, Shape{2, 3}, -50, 50), rng.Uniform(dt, Shape{1, 3}, -50, 50),
                   rng.Uniform(dt, Shape{3, 3}, -50, 50)},
        .build = One([dt](const Scope& sc, const std::vector<Output>& in) {
          Output whole = ops::Empty(sc, Shape{6, 3}, dt);
          whole = ops::WriteRows(sc, whole, in[1], 2);  // out of order
          whole = ops::WriteRows(sc, whole, in[2], 3);
          return ops::WriteRows(sc, whole, in[0], 0);
        }),
        .reference = One([](const std::vector<Tensor>& in) { return ConcatRef(in, 0); }),
        .no_gradient = "WriteRows has no gradient: it assembles all-reduce results"});
  }
}

// The all-reduce's assembly (_WriteRowsSum): from an Empty, rows set to a scaled sum of two, a
// copy of one, and a sum of three, out of order; the view of the first rows is fetched too.
void AddWriteRowsSum(CaseRng& rng, std::vector<OpCase>& cases) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kI32}) {
    const double scale = dt == DType::kI32 ? 1.0 : 0.25;
    std::vector<Tensor> in;
    for (int i = 0; i < 3; ++i) in.push_back(rng.Uniform(dt, Shape{2, 3}, -50, 50));
    cases.push_back(OpCase{
        .op = "_WriteRowsSum",
        .tag = "chain",
        .inputs = in,
        .build =
            [dt, scale](const Scope& sc, const std::vector<Output>& in) {
              auto add = [&](Output x, std::vector<Output> ys, int64_t offset, double by) {
                ys.insert(ys.begin(), x);
                int id = sc.AddNode("_WriteRowsSum", ys, {{"offset", offset}, {"scale", by}});
                return std::pair{sc.OutputOf(id, 0), sc.OutputOf(id, 1)};
              };
              Output whole = ops::Empty(sc, Shape{6, 3}, dt);
              auto [mean, mean_rows] = add(whole, {in[0], in[1]}, 4, scale);
              whole = add(mean, {in[2]}, 0, 1.0).first;
              whole = add(whole, {in[0], in[1], in[2]}, 2, 1.0).first;
              return CaseGraph{.outputs = {whole, mean_rows}};
            },
        .reference =
            [scale](const std::vector<Tensor>& in) {
              Tensor whole(in[0].dtype(), Shape{6, 3});
              Tensor rows(in[0].dtype(), Shape{2, 3});
              for (int64_t i = 0; i < 6; ++i) {
                auto at = [&](const Tensor& t) {
                  return t.dtype() == DType::kF32   ? double{t.data<float>()[i]}
                         : t.dtype() == DType::kF64 ? t.data<double>()[i]
                                                    : static_cast<double>(t.data<int32_t>()[i]);
                };
                const double sums[3] = {at(in[2]), at(in[0]) + at(in[1]) + at(in[2]),
                                        (at(in[0]) + at(in[1])) * scale};
                for (int part = 0; part < 3; ++part) {
                  const int64_t j = part * 6 + i;
                  if (whole.dtype() == DType::kF32) {
                    whole.data<float>()[j] = static_cast<float>(sums[part]);
                  } else if (whole.dtype() == DType::kF64) {
                    whole.data<double>()[j] = sums[part];
                  } else {
                    whole.data<int32_t>()[j] = static_cast<int32_t>(sums[part]);
                  }
                }
              }
              std::memcpy(rows.raw_data(),
                          static_cast<char*>(whole.raw_data()) + 12 * DTypeSize(whole.dtype()),
                          rows.num_bytes());
              return std::vector<Tensor>{whole, rows};
            },
        .no_gradient = "_WriteRowsSum has no gradient: it assembles all-reduce results"});
  }
}

}  // namespace

void AddArrayCases(CaseRng& rng, std::vector<OpCase>& cases) {
  AddPassThrough(rng, cases);
  AddReshapes(rng, cases);
  AddTransposeSlicePad(rng, cases);
  AddConcatSplit(rng, cases);
  AddWriteRows(rng, cases);
  AddWriteRowsSum(rng, cases);
  AddOneHot(rng, cases);
}

}  // namespace dflow::conformance
