// Cases for the stateful ops: Variable, Assign and the variable updates (ApplySGD,
// ApplyMomentum, ApplyAdam, ApplyAdamW, their gated twins ApplySGDIf, ... and the fused
// _MatMulApplySGD). Each case initialises its variables from fed values in a first run, then runs
// the update once and compares the value it outputs. AllFinite, the gate's check, is here too.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string_view>

#include "op_cases.h"
#include "ops/state_ops.h"
#include "ops/training_ops.h"

namespace dflow::conformance {
namespace {

constexpr const char* kStateful = "stateful: updates variables in place";

// A variable initialised from `value` (an input placeholder); its Assign goes to `init`.
Output InitVariable(const Scope& s, Output value, std::vector<std::string>& init) {
  Output v = ops::Variable(s, value.shape(), value.dtype());
  init.push_back(ops::Assign(s, v, value).node_name());
  return v;
}

void AddVariables(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<std::pair<DType, Shape>> shapes = {
      {DType::kF32, Shape{3, 7}},
      {DType::kF64, Shape{}},
      {DType::kI64, Shape{257}},
      {DType::kF32, Shape{0, 2}},
  };
  for (const auto& [dt, s] : shapes) {
    cases.push_back(
        OpCase{.op = "Variable",
               .inputs = {rng.Uniform(dt, s, -50, 50)},
               .build =
                   [](const Scope& sc, const std::vector<Output>& in) {
                     CaseGraph g;
                     g.outputs = {InitVariable(sc, in[0], g.init_targets)};
                     return g;
                   },
               .reference = One([](const std::vector<Tensor>& in) { return in[0].Clone(); }),
               .no_gradient = kStateful});
    cases.push_back(
        OpCase{.op = "Assign",
               .inputs = {rng.Uniform(dt, s, -50, 50), rng.Uniform(dt, s, -50, 50)},
               .build =
                   [](const Scope& sc, const std::vector<Output>& in) {
                     CaseGraph g;
                     Output v = InitVariable(sc, in[0], g.init_targets);
                     g.outputs = {ops::Assign(sc, v, in[1])};
                     return g;
                   },
               .reference = One([](const std::vector<Tensor>& in) { return in[1].Clone(); }),
               .no_gradient = kStateful});
  }
  // Without shape validation the variable takes the value's shape.
  cases.push_back(
      OpCase{.op = "Assign",
             .tag = "reshape",
             .inputs = {rng.Uniform(DType::kF32, Shape{2, 3}), rng.Uniform(DType::kF32, Shape{5})},
             .build =
                 [](const Scope& sc, const std::vector<Output>& in) {
                   CaseGraph g;
                   Output v = InitVariable(sc, in[0], g.init_targets);
                   g.outputs = {ops::Assign(sc, v, in[1], {.validate_shape = false})};
                   return g;
                 },
             .reference = One([](const std::vector<Tensor>& in) { return in[1].Clone(); }),
             .no_gradient = kStateful});
}

void AddUpdates(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<std::pair<DType, Shape>> shapes = {
      {DType::kF32, Shape{3, 7}},
      {DType::kF64, Shape{257}},
      {DType::kF32, Shape{}},
      {DType::kF32, Shape{0, 3}},
  };
  for (const auto& [dt, s] : shapes) {
    cases.push_back(OpCase{
        .op = "ApplySGD",
        .inputs = {rng.Uniform(dt, s), rng.Uniform(dt, Shape{}, 0.01, 0.5), rng.Uniform(dt, s)},
        .build =
            [](const Scope& sc, const std::vector<Output>& in) {
              CaseGraph g;
              Output v = InitVariable(sc, in[0], g.init_targets);
              g.outputs = {ops::ApplySGD(sc, v, in[1], in[2])};
              return g;
            },
        .reference = One([](const std::vector<Tensor>& in) {
          std::vector<double> w = ToDoubles(in[0]), grad = ToDoubles(in[2]);
          double lr = ElementAsDouble(in[1], 0);
          for (size_t i = 0; i < w.size(); ++i) w[i] -= lr * grad[i];
          return FromDoubles(in[0].dtype(), in[0].shape(), w);
        }),
        .no_gradient = kStateful});
    for (bool nesterov : {false, true}) {
      cases.push_back(
          OpCase{.op = "ApplyMomentum",
                 .tag = nesterov ? "nesterov" : "",
                 .inputs = {rng.Uniform(dt, s), rng.Uniform(dt, s),
                            rng.Uniform(dt, Shape{}, 0.01, 0.5), rng.Uniform(dt, s)},
                 .build =
                     [nesterov](const Scope& sc, const std::vector<Output>& in) {
                       CaseGraph g;
                       Output v = InitVariable(sc, in[0], g.init_targets);
                       Output accum = InitVariable(sc, in[1], g.init_targets);
                       g.outputs = {ops::ApplyMomentum(sc, v, accum, in[2], in[3], 0.9, nesterov)};
                       return g;
                     },
                 .reference = One([nesterov](const std::vector<Tensor>& in) {
                   std::vector<double> w = ToDoubles(in[0]), acc = ToDoubles(in[1]),
                                       grad = ToDoubles(in[3]);
                   double lr = ElementAsDouble(in[2], 0);
                   for (size_t i = 0; i < w.size(); ++i) {
                     acc[i] = 0.9 * acc[i] + grad[i];
                     w[i] -= nesterov ? lr * (grad[i] + 0.9 * acc[i]) : lr * acc[i];
                   }
                   return FromDoubles(in[0].dtype(), in[0].shape(), w);
                 }),
                 .no_gradient = kStateful});
    }
    for (double decay : {0.0, 0.01}) {
      cases.push_back(
          OpCase{.op = decay > 0 ? "ApplyAdamW" : "ApplyAdam",
                 .inputs = {rng.Uniform(dt, s), rng.Uniform(dt, s), rng.Uniform(dt, s, 0.01, 1),
                            Tensor::Scalar<int64_t>(3), rng.Uniform(dt, Shape{}, 0.01, 0.5),
                            rng.Uniform(dt, s)},
                 .build =
                     [decay](const Scope& sc, const std::vector<Output>& in) {
                       CaseGraph g;
                       Output v = InitVariable(sc, in[0], g.init_targets);
                       Output m = InitVariable(sc, in[1], g.init_targets);
                       Output sq = InitVariable(sc, in[2], g.init_targets);
                       Output step = InitVariable(sc, in[3], g.init_targets);
                       g.outputs = {ops::ApplyAdam(
                           sc, v, m, sq, step, in[4], in[5],
                           {.beta1 = 0.8, .beta2 = 0.99, .epsilon = 1e-6, .weight_decay = decay})};
                       return g;
                     },
                 .reference = One([decay](const std::vector<Tensor>& in) {
                   std::vector<double> w = ToDoubles(in[0]), m = ToDoubles(in[1]),
                                       v = ToDoubles(in[2]), grad = ToDoubles(in[5]);
                   double lr = ElementAsDouble(in[4], 0);
                   double t = ElementAsDouble(in[3], 0) + 1;
                   double step = lr * std::sqrt(1 - std::pow(0.99, t)) / (1 - std::pow(0.8, t));
                   for (size_t i = 0; i < w.size(); ++i) {
                     m[i] = 0.8 * m[i] + 0.2 * grad[i];
                     v[i] = 0.99 * v[i] + 0.01 * grad[i] * grad[i];
                     w[i] = w[i] - lr * decay * w[i] - step * m[i] / (std::sqrt(v[i]) + 1e-6);
                   }
                   return FromDoubles(in[0].dtype(), in[0].shape(), w);
                 }),
                 .tolerance = 4,
                 .no_gradient = kStateful});
    }
  }
  struct Mm {
    int64_t m, k, n;
    bool ta, tb;
  };
  for (const auto& d : std::vector<Mm>{{7, 13, 5, false, false},
                                       {7, 13, 5, true, false},
                                       {4, 9, 3, false, true},
                                       {1, 1, 1, true, true},
                                       {3, 0, 2, false, false}}) {
    bool ta = d.ta, tb = d.tb;
    cases.push_back(
        OpCase{
            .op = "_MatMulApplySGD",
            .tag = std::string(ta ? "ta" : "") + (tb ? "tb" : ""),
            .inputs = {rng.Uniform(DType::kF32, Shape{d.m, d.n}),
                       rng.Uniform(DType::kF32, Shape{}, 0.01, 0.5),
                       rng.Uniform(DType::kF32, ta ? Shape{d.k, d.m} : Shape{d.m, d.k}),
                       rng.Uniform(DType::kF32, tb ? Shape{d.n, d.k} : Shape{d.k, d.n})},
            .build =
                [ta, tb](const Scope& sc, const std::vector<Output>& in) {
                  CaseGraph g;
                  Output v = InitVariable(sc, in[0], g.init_targets);
                  g.outputs = {sc.OutputOf(sc.AddNode("_MatMulApplySGD", {v, in[1], in[2], in[3]},
                                                      {{"transpose_a", ta}, {"transpose_b", tb}}))};
                  return g;
                },
            .reference = One([ta, tb, d](const std::vector<Tensor>& in) {
              std::vector<double> w = ToDoubles(in[0]), a = ToDoubles(in[2]), b = ToDoubles(in[3]);
              double lr = ElementAsDouble(in[1], 0);
              for (int64_t i = 0; i < d.m; ++i) {
                for (int64_t j = 0; j < d.n; ++j) {
                  double acc = 0;
                  for (int64_t p = 0; p < d.k; ++p) {
                    acc += (ta ? a[p * d.m + i] : a[i * d.k + p]) *
                           (tb ? b[j * d.k + p] : b[p * d.n + j]);
                  }
                  w[i * d.n + j] -= lr * acc;
                }
              }
              return FromDoubles(DType::kF32, in[0].shape(), w);
            }),
            .no_gradient = kStateful});
  }
}

// The gated updates with the gate open (the update's value) and shut (the variable as it was).
// Attributes at their defaults: momentum 0.9; Adam's 0.9, 0.999, 1e-8 (AdamW decays by 0.01).
void AddGatedUpdates(CaseRng& rng, std::vector<OpCase>& cases) {
  const Shape s{5, 3};
  const DType f = DType::kF32;
  for (bool apply : {true, false}) {
    const Tensor gate = Tensor::Scalar<bool>(apply);
    const std::string tag = apply ? "open" : "shut";
    cases.push_back(OpCase{
        .op = "ApplySGDIf",
        .tag = tag,
        .inputs = {rng.Uniform(f, s), rng.Uniform(f, Shape{}, 0.01, 0.5), rng.Uniform(f, s), gate},
        .build =
            [](const Scope& sc, const std::vector<Output>& in) {
              CaseGraph g;
              Output v = InitVariable(sc, in[0], g.init_targets);
              g.outputs = {sc.OutputOf(sc.AddNode("ApplySGDIf", {v, in[1], in[2], in[3]}, {}))};
              return g;
            },
        .reference = One([apply](const std::vector<Tensor>& in) {
          std::vector<double> w = ToDoubles(in[0]), grad = ToDoubles(in[2]);
          const double lr = ElementAsDouble(in[1], 0);
          for (size_t i = 0; apply && i < w.size(); ++i) w[i] -= lr * grad[i];
          return FromDoubles(in[0].dtype(), in[0].shape(), w);
        }),
        .no_gradient = kStateful});
    cases.push_back(OpCase{.op = "ApplyMomentumIf",
                           .tag = tag,
                           .inputs = {rng.Uniform(f, s), rng.Uniform(f, s),
                                      rng.Uniform(f, Shape{}, 0.01, 0.5), rng.Uniform(f, s), gate},
                           .build =
                               [](const Scope& sc, const std::vector<Output>& in) {
                                 CaseGraph g;
                                 Output v = InitVariable(sc, in[0], g.init_targets);
                                 Output accum = InitVariable(sc, in[1], g.init_targets);
                                 g.outputs = {sc.OutputOf(sc.AddNode(
                                     "ApplyMomentumIf", {v, accum, in[2], in[3], in[4]}, {}))};
                                 return g;
                               },
                           .reference = One([apply](const std::vector<Tensor>& in) {
                             std::vector<double> w = ToDoubles(in[0]), acc = ToDoubles(in[1]),
                                                 grad = ToDoubles(in[3]);
                             const double lr = ElementAsDouble(in[2], 0);
                             for (size_t i = 0; apply && i < w.size(); ++i) {
                               acc[i] = 0.9 * acc[i] + grad[i];
                               w[i] -= lr * acc[i];
                             }
                             return FromDoubles(in[0].dtype(), in[0].shape(), w);
                           }),
                           .no_gradient = kStateful});
    for (const char* op : {"ApplyAdamIf", "ApplyAdamWIf"}) {
      const double decay = std::string_view(op) == "ApplyAdamWIf" ? 0.01 : 0.0;
      cases.push_back(OpCase{
          .op = op,
          .tag = tag,
          .inputs = {rng.Uniform(f, s), rng.Uniform(f, s), rng.Uniform(f, s, 0.01, 1),
                     Tensor::Scalar<int64_t>(3), rng.Uniform(f, Shape{}, 0.01, 0.5),
                     rng.Uniform(f, s), gate},
          .build =
              [op](const Scope& sc, const std::vector<Output>& in) {
                CaseGraph g;
                Output v = InitVariable(sc, in[0], g.init_targets);
                Output m = InitVariable(sc, in[1], g.init_targets);
                Output sq = InitVariable(sc, in[2], g.init_targets);
                Output step = InitVariable(sc, in[3], g.init_targets);
                g.outputs = {
                    sc.OutputOf(sc.AddNode(op, {v, m, sq, step, in[4], in[5], in[6]}, {}))};
                return g;
              },
          .reference = One([apply, decay](const std::vector<Tensor>& in) {
            std::vector<double> w = ToDoubles(in[0]), m = ToDoubles(in[1]), v = ToDoubles(in[2]),
                                grad = ToDoubles(in[5]);
            const double lr = ElementAsDouble(in[4], 0);
            const double t = ElementAsDouble(in[3], 0) + 1;
            const double step = lr * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
            for (size_t i = 0; apply && i < w.size(); ++i) {
              m[i] = 0.9 * m[i] + 0.1 * grad[i];
              v[i] = 0.999 * v[i] + 0.001 * grad[i] * grad[i];
              w[i] = w[i] - lr * decay * w[i] - step * m[i] / (std::sqrt(v[i]) + 1e-8);
            }
            return FromDoubles(in[0].dtype(), in[0].shape(), w);
          }),
          .tolerance = 4,
          .no_gradient = kStateful});
    }
  }
}

// AllFinite over three tensors of f32 or f64, with an infinity or a NaN planted in one of them or
// in none (f16 and bf16, which the cases cannot feed: tests/ops/cpu/kernels_test.cc).
void AddAllFinite(CaseRng& rng, std::vector<OpCase>& cases) {
  const double kInf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::kF32, DType::kF64}) {
    for (int planted : {-1, 0, 1}) {  // -1: none; 0: an infinity in the first; 1: a NaN in the last
      std::vector<Tensor> in = {rng.Uniform(dt, Shape{4, 5}), rng.Uniform(dt, Shape{}),
                                rng.Uniform(dt, Shape{1000})};
      if (planted >= 0) {
        Tensor& t = planted == 0 ? in[0] : in[2];
        std::vector<double> v = ToDoubles(t);
        v[planted == 0 ? 7 : 999] = planted == 0 ? -kInf : std::nan("");
        t = FromDoubles(dt, t.shape(), v);
      }
      cases.push_back(OpCase{.op = "AllFinite",
                             .tag = fmt::format("{}_{}", DTypeName(dt),
                                                planted < 0    ? "finite"
                                                : planted == 0 ? "inf"
                                                               : "nan"),
                             .inputs = in,
                             .build =
                                 [](const Scope& sc, const std::vector<Output>& x) {
                                   CaseGraph g;
                                   g.outputs = {sc.OutputOf(sc.AddNode("AllFinite", x, {}))};
                                   return g;
                                 },
                             .reference = One([planted](const std::vector<Tensor>&) {
                               return Tensor::Scalar<bool>(planted < 0);
                             }),
                             .no_gradient = "a bool"});
    }
  }
}

}  // namespace

void AddStateCases(CaseRng& rng, std::vector<OpCase>& cases) {
  AddVariables(rng, cases);
  AddUpdates(rng, cases);
  AddGatedUpdates(rng, cases);
  AddAllFinite(rng, cases);
}

}  // namespace dflow::conformance
