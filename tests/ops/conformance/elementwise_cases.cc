// Cases for the element-wise ops: binary arithmetic and comparisons with broadcasting, Select,
// BiasAdd, the unary ops, the activation gradients and Cast; and the same ops on seeded random
// shapes (AddRandomShapeCases).
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "op_cases.h"
#include "ops/grad_ops.h"
#include "ops/logic_ops.h"
#include "ops/math_ops.h"
#include "ops/unary_ops.h"

namespace dflow::conformance {
namespace {

using BinaryOp = Output (*)(const Scope&, Output, Output);
using UnaryOp = Output (*)(const Scope&, Output);
using BinaryFn = double (*)(double, double);
using UnaryFn = double (*)(double);

const double kSqrt2 = std::sqrt(2.0);

// out[i] = f(a[i'], b[i'']) over the broadcast shape; `out_dtype` kInvalid: a's dtype.
Tensor BroadcastRef(const Tensor& a, const Tensor& b, BinaryFn f,
                    DType out_dtype = DType::kInvalid) {
  Shape s = Broadcast(a.shape(), b.shape());
  std::vector<double> v(s.num_elements());
  for (int64_t i = 0; i < s.num_elements(); ++i) {
    v[i] = f(ElementAsDouble(a, BroadcastIndex(a.shape(), s, i)),
             ElementAsDouble(b, BroadcastIndex(b.shape(), s, i)));
  }
  return FromDoubles(out_dtype == DType::kInvalid ? a.dtype() : out_dtype, s, v);
}

// Select(c, a, b) over the three inputs' broadcast shape.
Tensor SelectRef(const std::vector<Tensor>& in) {
  Shape s = Broadcast(Broadcast(in[0].shape(), in[1].shape()), in[2].shape());
  std::vector<double> v(s.num_elements());
  for (int64_t i = 0; i < s.num_elements(); ++i) {
    v[i] = ElementAsDouble(in[0], BroadcastIndex(in[0].shape(), s, i)) != 0
               ? ElementAsDouble(in[1], BroadcastIndex(in[1].shape(), s, i))
               : ElementAsDouble(in[2], BroadcastIndex(in[2].shape(), s, i));
  }
  return FromDoubles(in[1].dtype(), s, v);
}

Tensor MapRef(const Tensor& x, UnaryFn f, DType out_dtype = DType::kInvalid) {
  std::vector<double> v = ToDoubles(x);
  for (auto& e : v) e = f(e);
  return FromDoubles(out_dtype == DType::kInvalid ? x.dtype() : out_dtype, x.shape(), v);
}

struct ShapePair {
  Shape a, b;
};
// Broadcasting in each direction, scalars, odd and empty sizes.
const std::vector<ShapePair> kF32Pairs = {
    {Shape{3, 1, 5}, Shape{4, 5}},
    {Shape{}, Shape{7}},
    {Shape{33}, Shape{}},
    {Shape{257}, Shape{257}},
    {Shape{0, 3}, Shape{3}},
    {Shape{1}, Shape{1}},
    {Shape{2, 1, 3, 1}, Shape{4, 1, 2}},
};

struct BinarySpec {
  const char* op;
  BinaryOp build;
  BinaryFn ref;
  bool integers;
};

void AddArithmetic(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<BinarySpec> specs = {
      {"Add", ops::Add, [](double a, double b) { return a + b; }, true},
      {"Sub", ops::Sub, [](double a, double b) { return a - b; }, true},
      {"Mul", ops::Mul, [](double a, double b) { return a * b; }, true},
      {"Div", ops::Div, [](double a, double b) { return a / b; }, true},
      {"Maximum", ops::Maximum, [](double a, double b) { return a > b ? a : b; }, true},
      {"Minimum", ops::Minimum, [](double a, double b) { return a < b ? a : b; }, true},
      {"Pow", ops::Pow, [](double a, double b) { return std::pow(a, b); }, false},
  };
  for (const auto& spec : specs) {
    std::string op = spec.op;
    auto make = [&](DType dt, const ShapePair& p) {
      OpCase c{.op = op};
      if (op == "Pow") {
        c.inputs = {rng.Uniform(dt, p.a, 0.5, 2), rng.Uniform(dt, p.b, -1.5, 1.5)};
      } else if (IsInteger(dt)) {
        c.inputs = {rng.Ints(dt, p.a, -50, 50),
                    op == "Div" ? rng.Uniform(dt, p.b, -9, 9, 1) : rng.Ints(dt, p.b, -50, 50)};
      } else {
        c.inputs = {rng.Uniform(dt, p.a), rng.Uniform(dt, p.b, -2, 2, op == "Div" ? 0.5 : 0.1)};
      }
      BinaryOp b = spec.build;
      BinaryFn f = spec.ref;
      c.build =
          One([b](const Scope& s, const std::vector<Output>& in) { return b(s, in[0], in[1]); });
      // Integer division truncates toward zero, as C++ does, and so does FromDoubles.
      c.reference =
          One([f](const std::vector<Tensor>& in) { return BroadcastRef(in[0], in[1], f); });
      cases.push_back(std::move(c));
    };
    for (const auto& p : kF32Pairs) make(DType::kF32, p);
    make(DType::kF64, {Shape{3, 1, 5}, Shape{4, 5}});
    if (spec.integers) {
      make(DType::kI32, {Shape{2, 1, 3, 1}, Shape{4, 1, 2}});
      make(DType::kI64, {Shape{33}, Shape{}});
    }
  }
}

void AddComparisons(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<BinarySpec> specs = {
      {"Equal", ops::Equal, [](double a, double b) { return double(a == b); }, true},
      {"NotEqual", ops::NotEqual, [](double a, double b) { return double(a != b); }, true},
      {"Less", ops::Less, [](double a, double b) { return double(a < b); }, true},
      {"LessEqual", ops::LessEqual, [](double a, double b) { return double(a <= b); }, true},
      {"Greater", ops::Greater, [](double a, double b) { return double(a > b); }, true},
      {"GreaterEqual", ops::GreaterEqual, [](double a, double b) { return double(a >= b); }, true},
  };
  const std::vector<std::pair<DType, ShapePair>> shapes = {
      {DType::kF32, {Shape{3, 1, 5}, Shape{4, 5}}},
      {DType::kF32, {Shape{}, Shape{7}}},
      {DType::kF32, {Shape{0, 3}, Shape{3}}},
      {DType::kF64, {Shape{33}, Shape{33}}},
      {DType::kI32, {Shape{2, 1, 3, 1}, Shape{4, 1, 2}}},
      {DType::kI64, {Shape{257}, Shape{1}}},
  };
  for (const auto& spec : specs) {
    for (const auto& [dt, p] : shapes) {
      BinaryOp b = spec.build;
      BinaryFn f = spec.ref;
      // Small integers make ties, so equality is exercised.
      cases.push_back(OpCase{.op = spec.op,
                             .inputs = {rng.Ints(dt, p.a, -2, 2), rng.Ints(dt, p.b, -2, 2)},
                             .build = One([b](const Scope& s, const std::vector<Output>& in) {
                               return b(s, in[0], in[1]);
                             }),
                             .reference = One([f](const std::vector<Tensor>& in) {
                               return BroadcastRef(in[0], in[1], f, DType::kBool);
                             }),
                             .no_gradient = "bool output"});
    }
  }
}

void AddSelectAndBiasAdd(CaseRng& rng, std::vector<OpCase>& cases) {
  struct Triple {
    DType dt;
    Shape cond, a, b;
  };
  const std::vector<Triple> triples = {
      {DType::kF32, Shape{2, 3}, Shape{2, 3}, Shape{2, 3}},
      {DType::kF32, Shape{4, 1}, Shape{3, 1, 5}, Shape{5}},
      {DType::kF32, Shape{}, Shape{7}, Shape{7}},
      {DType::kF32, Shape{33}, Shape{}, Shape{33}},
      {DType::kF64, Shape{3, 1}, Shape{1, 4}, Shape{3, 4}},
      {DType::kI32, Shape{2, 3}, Shape{3}, Shape{2, 1}},
  };
  for (const auto& t : triples) {
    cases.push_back(OpCase{.op = "Select",
                           .inputs = {rng.Bools(t.cond), rng.Uniform(t.dt, t.a, -50, 50),
                                      rng.Uniform(t.dt, t.b, -50, 50)},
                           .build = One([](const Scope& s, const std::vector<Output>& in) {
                             return ops::Select(s, in[0], in[1], in[2]);
                           }),
                           .reference = One(SelectRef)});
  }
  const std::vector<std::pair<DType, ShapePair>> bias = {
      {DType::kF32, {Shape{4, 3}, Shape{3}}},   {DType::kF32, {Shape{2, 3, 7}, Shape{7}}},
      {DType::kF32, {Shape{1}, Shape{1}}},      {DType::kF32, {Shape{0, 5}, Shape{5}}},
      {DType::kF32, {Shape{257, 2}, Shape{2}}}, {DType::kF64, {Shape{3, 5}, Shape{5}}},
      {DType::kI64, {Shape{3, 5}, Shape{5}}},
  };
  for (const auto& [dt, p] : bias) {
    cases.push_back(OpCase{.op = "BiasAdd",
                           .inputs = {rng.Uniform(dt, p.a, -50, 50), rng.Uniform(dt, p.b, -50, 50)},
                           .build = One([](const Scope& s, const std::vector<Output>& in) {
                             return ops::BiasAdd(s, in[0], in[1]);
                           }),
                           .reference = One([](const std::vector<Tensor>& in) {
                             return BroadcastRef(in[0], in[1],
                                                 [](double a, double b) { return a + b; });
                           })});
  }
}

double Phi(double x) { return 0.5 * (1 + std::erf(x / kSqrt2)); }

void AddUnary(CaseRng& rng, std::vector<OpCase>& cases) {
  struct Spec {
    const char* op;
    UnaryOp build;
    UnaryFn ref;
    double lo, hi;
    bool integers;
    // Non-empty: the gradient is not checked here, for this reason.
    const char* no_gradient = "";
  };
  // Finite differences jump where these are discontinuous; their zero gradient is checked in
  // gradient_check_test.cc.
  constexpr char kSteps[] = "piecewise constant (gradient_check_test.cc checks its zero gradient)";
  const std::vector<Spec> specs = {
      {"Neg", ops::Neg, [](double x) { return -x; }, -3, 3, true},
      {"Exp", ops::Exp, [](double x) { return std::exp(x); }, -3, 3, false},
      {"Log", ops::Log, [](double x) { return std::log(x); }, 0.2, 3, false},
      {"Sqrt", ops::Sqrt, [](double x) { return std::sqrt(x); }, 0.2, 3, false},
      {"Rsqrt", ops::Rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.2, 3, false},
      {"Square", ops::Square, [](double x) { return x * x; }, -3, 3, true},
      {"Relu", ops::Relu, [](double x) { return x > 0 ? x : 0; }, -3, 3, true},
      {"Sigmoid", ops::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -3, 3, false},
      {"Tanh", ops::Tanh, [](double x) { return std::tanh(x); }, -3, 3, false},
      {"Gelu", ops::Gelu, [](double x) { return x * Phi(x); }, -3, 3, false},
      {"Abs", ops::Abs, [](double x) { return std::fabs(x); }, -3, 3, true},
      {"Sign", ops::Sign, [](double x) { return double((0 < x) - (x < 0)); }, -3, 3, true, kSteps},
      {"Floor", ops::Floor, [](double x) { return std::floor(x); }, -3, 3, false, kSteps},
      {"Ceil", ops::Ceil, [](double x) { return std::ceil(x); }, -3, 3, false, kSteps},
      {"Round", ops::Round, [](double x) { return std::nearbyint(x); }, -3, 3, false, kSteps},
      {"Sin", ops::Sin, [](double x) { return std::sin(x); }, -3, 3, false},
      {"Cos", ops::Cos, [](double x) { return std::cos(x); }, -3, 3, false},
      {"Tan", ops::Tan, [](double x) { return std::tan(x); }, -1.2, 1.2, false},
      {"Asin", ops::Asin, [](double x) { return std::asin(x); }, -0.9, 0.9, false},
      {"Acos", ops::Acos, [](double x) { return std::acos(x); }, -0.9, 0.9, false},
      {"Atan", ops::Atan, [](double x) { return std::atan(x); }, -3, 3, false},
      {"Sinh", ops::Sinh, [](double x) { return std::sinh(x); }, -3, 3, false},
      {"Cosh", ops::Cosh, [](double x) { return std::cosh(x); }, -3, 3, false},
      {"Asinh", ops::Asinh, [](double x) { return std::asinh(x); }, -3, 3, false},
      {"Acosh", ops::Acosh, [](double x) { return std::acosh(x); }, 1.2, 3, false},
      {"Atanh", ops::Atanh, [](double x) { return std::atanh(x); }, -0.9, 0.9, false},
      {"Erf", ops::Erf, [](double x) { return std::erf(x); }, -2, 2, false},
  };
  const std::vector<std::pair<DType, Shape>> shapes = {
      {DType::kF32, Shape{257}},  {DType::kF32, Shape{3, 7}}, {DType::kF32, Shape{}},
      {DType::kF32, Shape{0, 4}}, {DType::kF64, Shape{3, 7}}, {DType::kI32, Shape{2, 9}},
      {DType::kI64, Shape{5}},
  };
  for (const auto& spec : specs) {
    for (const auto& [dt, s] : shapes) {
      if (IsInteger(dt) && !spec.integers) continue;
      UnaryOp b = spec.build;
      UnaryFn f = spec.ref;
      cases.push_back(OpCase{
          .op = spec.op,
          .inputs = {IsInteger(dt) ? rng.Ints(dt, s, -20, 20)
                                   : rng.Uniform(dt, s, spec.lo, spec.hi)},
          .build =
              One([b](const Scope& sc, const std::vector<Output>& in) { return b(sc, in[0]); }),
          .reference = One([f](const std::vector<Tensor>& in) { return MapRef(in[0], f); }),
          .no_gradient = spec.no_gradient});
    }
  }
  for (double alpha : {0.2, 0.01}) {
    for (const auto& [dt, s] : std::vector<std::pair<DType, Shape>>{
             {DType::kF32, Shape{257}}, {DType::kF32, Shape{3, 7}}, {DType::kF64, Shape{4}}}) {
      cases.push_back(OpCase{.op = "LeakyRelu",
                             .tag = alpha == 0.2 ? "alpha0_2" : "alpha0_01",
                             .inputs = {rng.Uniform(dt, s, -3, 3)},
                             .build = One([alpha](const Scope& sc, const std::vector<Output>& in) {
                               return ops::LeakyRelu(sc, in[0], alpha);
                             }),
                             .reference = One([alpha](const std::vector<Tensor>& in) {
                               std::vector<double> v = ToDoubles(in[0]);
                               for (auto& x : v) x = x > 0 ? x : alpha * x;
                               return FromDoubles(in[0].dtype(), in[0].shape(), v);
                             })});
    }
  }
}

void AddActivationGrads(CaseRng& rng, std::vector<OpCase>& cases) {
  using Fn = double (*)(double g, double x);
  struct Spec {
    const char* op;
    Fn ref;
  };
  const std::vector<Spec> specs = {
      {"ReluGrad", [](double g, double x) { return x > 0 ? g : 0; }},
      {"LeakyReluGrad", [](double g, double x) { return x > 0 ? g : 0.3 * g; }},
      {"GeluGrad",
       [](double g, double x) {
         return g * (Phi(x) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI));
       }},
  };
  for (const auto& spec : specs) {
    std::string op = spec.op;
    for (const auto& [dt, s] : std::vector<std::pair<DType, Shape>>{{DType::kF32, Shape{257}},
                                                                    {DType::kF32, Shape{3, 7}},
                                                                    {DType::kF32, Shape{}},
                                                                    {DType::kF64, Shape{2, 5}}}) {
      Fn f = spec.ref;
      cases.push_back(OpCase{.op = op,
                             .inputs = {rng.Uniform(dt, s, -3, 3), rng.Uniform(dt, s, -3, 3)},
                             .build = One([op](const Scope& sc, const std::vector<Output>& in) {
                               if (op == "ReluGrad") return ops::ReluGrad(sc, in[0], in[1]);
                               if (op == "LeakyReluGrad")
                                 return ops::LeakyReluGrad(sc, in[0], in[1], 0.3);
                               return ops::GeluGrad(sc, in[0], in[1]);
                             }),
                             .reference = One([f](const std::vector<Tensor>& in) {
                               std::vector<double> g = ToDoubles(in[0]), x = ToDoubles(in[1]);
                               for (size_t i = 0; i < g.size(); ++i) g[i] = f(g[i], x[i]);
                               return FromDoubles(in[0].dtype(), in[0].shape(), g);
                             })});
    }
  }
}

void AddCasts(CaseRng& rng, std::vector<OpCase>& cases) {
  struct Spec {
    DType from, to;
    Shape shape;
  };
  const std::vector<Spec> specs = {
      {DType::kF32, DType::kF64, Shape{3, 7}},  {DType::kF32, DType::kI32, Shape{33}},
      {DType::kF32, DType::kI64, Shape{}},      {DType::kF32, DType::kU8, Shape{2, 5}},
      {DType::kF32, DType::kBool, Shape{0, 2}}, {DType::kF32, DType::kBool, Shape{9}},
      {DType::kF64, DType::kF32, Shape{257}},   {DType::kI32, DType::kF32, Shape{4, 3}},
      {DType::kI32, DType::kBool, Shape{7}},    {DType::kI64, DType::kI32, Shape{5}},
      {DType::kBool, DType::kF32, Shape{6}},    {DType::kBool, DType::kI32, Shape{2, 2}},
      {DType::kU8, DType::kF32, Shape{8}},      {DType::kF32, DType::kF32, Shape{3}},
  };
  for (const auto& spec : specs) {
    Tensor x;
    if (spec.from == DType::kBool) {
      x = rng.Bools(spec.shape);
    } else if (spec.to == DType::kU8 || spec.from == DType::kU8) {
      x = rng.Uniform(spec.from, spec.shape, 0, 250, 0);
    } else if (spec.to == DType::kBool) {
      x = rng.Ints(spec.from, spec.shape, -2, 2);  // zeros among them
    } else if (IsFloatingPoint(spec.from) && IsFloatingPoint(spec.to)) {
      x = rng.Uniform(spec.from, spec.shape);  // small: finite differences in f32 stay accurate
    } else {
      x = rng.Uniform(spec.from, spec.shape, -100, 100);
    }
    DType to = spec.to;
    cases.push_back(OpCase{
        .op = "Cast",
        .tag = "to_" + std::string(DTypeName(to)),
        .inputs = {x},
        .build = One([to](const Scope& sc, const std::vector<Output>& in) {
          return ops::Cast(sc, in[0], to);
        }),
        .reference = One([to](const std::vector<Tensor>& in) { return CastTo(in[0], to); })});
  }
}

// ---- Seeded random shapes ----

// Broadcast-compatible shape pairs drawn from `gen`: ranks 0 to 4, odd sizes, size-1 dimensions
// on either side, now and then an empty one; at most 4096 output elements. Drawn with gen()
// and %, so the table is the same with every standard library.
std::vector<ShapePair> RandomPairs(std::mt19937& gen, int count) {
  const int64_t sizes[] = {1, 2, 3, 5, 7, 13, 17};
  std::vector<ShapePair> out;
  std::set<std::string> seen;
  while (static_cast<int>(out.size()) < count) {
    const int rank = static_cast<int>(gen() % 5);
    std::vector<int64_t> dims(rank);
    // An empty dimension one time in 24 draws, else one of the others.
    for (auto& d : dims) d = gen() % 24 == 0 ? 0 : sizes[gen() % 7];
    // Too many elements: shrink the largest dimension until it fits (rejecting such draws
    // would leave mostly the empty ones).
    auto total = [&] {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      return n;
    };
    while (total() > 4096) *std::max_element(dims.begin(), dims.end()) = sizes[gen() % 4];
    auto side = [&](int r) {
      std::vector<int64_t> s(dims.end() - r, dims.end());
      for (auto& d : s) {
        if (gen() % 3 == 0) d = 1;  // broadcast along it
      }
      return Shape(s);
    };
    const int ra = rank == 0 ? 0 : static_cast<int>(gen() % (rank + 1));
    const int rb = rank == 0 ? 0 : static_cast<int>(gen() % (rank + 1));
    ShapePair p{side(ra), side(rb)};
    // One side keeps every dimension, so the output is `dims`.
    if (gen() % 2 == 0) {
      p.a = Shape(dims);
    } else {
      p.b = Shape(dims);
    }
    if (seen.insert(p.a.ToString() + "|" + p.b.ToString()).second) out.push_back(p);
  }
  return out;
}

}  // namespace

void AddRandomShapeCases(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<ShapePair> pairs = RandomPairs(rng.gen(), 12);
  const std::vector<BinarySpec> arithmetic = {
      {"Add", ops::Add, [](double a, double b) { return a + b; }, true},
      {"Sub", ops::Sub, [](double a, double b) { return a - b; }, true},
      {"Mul", ops::Mul, [](double a, double b) { return a * b; }, true},
      {"Div", ops::Div, [](double a, double b) { return a / b; }, true},
      {"Maximum", ops::Maximum, [](double a, double b) { return a > b ? a : b; }, true},
      {"Minimum", ops::Minimum, [](double a, double b) { return a < b ? a : b; }, true},
      {"GreaterEqual", ops::GreaterEqual, [](double a, double b) { return double(a >= b); }, true},
      {"Less", ops::Less, [](double a, double b) { return double(a < b); }, true},
  };
  for (const auto& spec : arithmetic) {
    const bool compare = std::string(spec.op) == "GreaterEqual" || std::string(spec.op) == "Less";
    for (size_t i = 0; i < pairs.size(); ++i) {
      const ShapePair& p = pairs[i];
      // f32 mostly; every fourth pair in f64, i32 or i64.
      const DType dt = i % 4 != 3         ? DType::kF32
                       : (i / 4) % 3 == 0 ? DType::kF64
                       : (i / 4) % 3 == 1 ? DType::kI32
                                          : DType::kI64;
      OpCase c{.op = spec.op, .tag = "rand"};
      if (compare) {
        c.inputs = {rng.Ints(dt, p.a, -2, 2), rng.Ints(dt, p.b, -2, 2)};
        c.no_gradient = "bool output";
      } else if (IsInteger(dt)) {
        c.inputs = {rng.Ints(dt, p.a, -50, 50), std::string(spec.op) == "Div"
                                                    ? rng.Uniform(dt, p.b, -9, 9, 1)
                                                    : rng.Ints(dt, p.b, -50, 50)};
      } else {
        c.inputs = {rng.Uniform(dt, p.a),
                    rng.Uniform(dt, p.b, -2, 2, std::string(spec.op) == "Div" ? 0.5 : 0.1)};
      }
      BinaryOp b = spec.build;
      BinaryFn f = spec.ref;
      c.build =
          One([b](const Scope& s, const std::vector<Output>& in) { return b(s, in[0], in[1]); });
      c.reference = One([f, compare](const std::vector<Tensor>& in) {
        return BroadcastRef(in[0], in[1], f, compare ? DType::kBool : DType::kInvalid);
      });
      cases.push_back(std::move(c));
    }
  }
  // Select over three random shapes that broadcast together: the pair's and the output's.
  for (const ShapePair& p : pairs) {
    const Shape out = Broadcast(p.a, p.b);
    cases.push_back(OpCase{.op = "Select",
                           .tag = "rand",
                           .inputs = {rng.Bools(p.a), rng.Uniform(DType::kF32, p.b, -50, 50),
                                      rng.Uniform(DType::kF32, out, -50, 50)},
                           .build = One([](const Scope& s, const std::vector<Output>& in) {
                             return ops::Select(s, in[0], in[1], in[2]);
                           }),
                           .reference = One(SelectRef)});
  }
  // Unary ops on the pairs' output shapes.
  const std::vector<std::pair<const char*, std::pair<UnaryOp, UnaryFn>>> unary = {
      {"Tanh", {ops::Tanh, [](double x) { return std::tanh(x); }}},
      {"Exp", {ops::Exp, [](double x) { return std::exp(x); }}},
      {"Relu", {ops::Relu, [](double x) { return x > 0 ? x : 0; }}},
  };
  for (const auto& [op, fns] : unary) {
    for (const ShapePair& p : pairs) {
      UnaryOp b = fns.first;
      UnaryFn f = fns.second;
      cases.push_back(OpCase{
          .op = op,
          .tag = "rand",
          .inputs = {rng.Uniform(DType::kF32, Broadcast(p.a, p.b), -3, 3)},
          .build =
              One([b](const Scope& sc, const std::vector<Output>& in) { return b(sc, in[0]); }),
          .reference = One([f](const std::vector<Tensor>& in) { return MapRef(in[0], f); })});
    }
  }
}

namespace {}  // namespace

void AddElementwiseCases(CaseRng& rng, std::vector<OpCase>& cases) {
  AddArithmetic(rng, cases);
  AddComparisons(rng, cases);
  AddSelectAndBiasAdd(rng, cases);
  AddUnary(rng, cases);
  AddActivationGrads(rng, cases);
  AddCasts(rng, cases);
}

}  // namespace dflow::conformance
