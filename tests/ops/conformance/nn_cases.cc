// Cases for the neural-network ops: convolution and its gradients (and the fused form),
// pooling and its gradients (and the argmax forms), softmax, the cross-entropy loss and batch
// normalisation.
#include <cmath>
#include <limits>
#include <tuple>

#include "op_cases.h"
#include "ops/attention_dims.h"
#include "ops/batch_norm_ops.h"
#include "ops/conv_ops.h"
#include "ops/nn_ops.h"

namespace dflow::conformance {
namespace {

// ---- Convolution ----

struct ConvGeom {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups;
  ops::Conv2DAttrs a;
};

ConvGeom Conv(const Shape& x, const Shape& w, const ops::Conv2DAttrs& a) {
  ConvGeom g{x[0], x[1], x[2], x[3], w[0], w[2], w[3], 0, 0, a.groups, a};
  g.oh = (g.h + a.pads[0] + a.pads[2] - a.dilations[0] * (g.kh - 1) - 1) / a.strides[0] + 1;
  g.ow = (g.w + a.pads[1] + a.pads[3] - a.dilations[1] * (g.kw - 1) - 1) / a.strides[1] + 1;
  return g;
}

// Calls f(x_index, w_index, y_index) for every product a convolution sums.
template <typename F>
void ForEachTap(const ConvGeom& g, F&& f) {
  int64_t cg = g.c / g.groups, og = g.o / g.groups;
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t o = 0; o < g.o; ++o) {
      int64_t group = o / og;
      for (int64_t i = 0; i < g.oh; ++i) {
        for (int64_t j = 0; j < g.ow; ++j) {
          int64_t yi = ((n * g.o + o) * g.oh + i) * g.ow + j;
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t p = 0; p < g.kh; ++p) {
              int64_t r = i * g.a.strides[0] - g.a.pads[0] + p * g.a.dilations[0];
              if (r < 0 || r >= g.h) continue;
              for (int64_t q = 0; q < g.kw; ++q) {
                int64_t s = j * g.a.strides[1] - g.a.pads[1] + q * g.a.dilations[1];
                if (s < 0 || s >= g.w) continue;
                int64_t xi = ((n * g.c + group * cg + c) * g.h + r) * g.w + s;
                int64_t wi = ((o * cg + c) * g.kh + p) * g.kw + q;
                f(xi, wi, yi);
              }
            }
          }
        }
      }
    }
  }
}

struct ConvSpec {
  DType dt;
  Shape x, w;
  ops::Conv2DAttrs a;
  std::string tag;
};

void AddConvolutions(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<ConvSpec> specs = {
      {DType::kF32, Shape{2, 3, 7, 6}, Shape{4, 3, 3, 3}, {.pads = {1, 1, 1, 1}}, "pad1"},
      {DType::kF32,
       Shape{1, 4, 6, 6},
       Shape{4, 2, 2, 3},
       {.strides = {2, 1}, .pads = {0, 1, 1, 0}, .dilations = {1, 2}, .groups = 2},
       "s2x1_dil1x2_g2"},
      {DType::kF32, Shape{1, 1, 1, 1}, Shape{1, 1, 1, 1}, {}, "unit"},
      {DType::kF32, Shape{2, 2, 9, 5}, Shape{3, 2, 1, 1}, {.strides = {2, 2}}, "1x1_s2"},
      {DType::kF32, Shape{3, 1, 5, 5}, Shape{2, 1, 5, 5}, {}, "full"},
      {DType::kF64, Shape{1, 2, 5, 4}, Shape{3, 2, 3, 3}, {.pads = {1, 0, 1, 2}}, "pad1021"},
  };
  for (const auto& sp : specs) {
    ops::Conv2DAttrs a = sp.a;
    ConvGeom g = Conv(sp.x, sp.w, a);
    Shape ys{g.n, g.o, g.oh, g.ow};
    cases.push_back(OpCase{.op = "Conv2D",
                           .tag = sp.tag,
                           .inputs = {rng.Uniform(sp.dt, sp.x), rng.Uniform(sp.dt, sp.w)},
                           .build = One([a](const Scope& s, const std::vector<Output>& in) {
                             return ops::Conv2D(s, in[0], in[1], a);
                           }),
                           .reference = One([a](const std::vector<Tensor>& in) {
                             ConvGeom cg = Conv(in[0].shape(), in[1].shape(), a);
                             std::vector<double> x = ToDoubles(in[0]), w = ToDoubles(in[1]);
                             std::vector<double> y(cg.n * cg.o * cg.oh * cg.ow, 0);
                             ForEachTap(cg, [&](int64_t xi, int64_t wi, int64_t yi) {
                               y[yi] += x[xi] * w[wi];
                             });
                             return FromDoubles(in[0].dtype(), Shape{cg.n, cg.o, cg.oh, cg.ow}, y);
                           })});
    // x_like and w_like give only their shapes.
    cases.push_back(OpCase{
        .op = "Conv2DBackpropInput",
        .tag = sp.tag,
        .inputs = {rng.Uniform(sp.dt, ys), rng.Uniform(sp.dt, sp.w), rng.Uniform(sp.dt, sp.x)},
        .build = One([a](const Scope& s, const std::vector<Output>& in) {
          return ops::Conv2DBackpropInput(s, in[0], in[1], in[2], a);
        }),
        .reference = One([a](const std::vector<Tensor>& in) {
          ConvGeom cg = Conv(in[2].shape(), in[1].shape(), a);
          std::vector<double> dy = ToDoubles(in[0]), w = ToDoubles(in[1]);
          std::vector<double> dx(in[2].num_elements(), 0);
          ForEachTap(cg, [&](int64_t xi, int64_t wi, int64_t yi) { dx[xi] += dy[yi] * w[wi]; });
          return FromDoubles(in[0].dtype(), in[2].shape(), dx);
        }),
        .grad_inputs = {0, 1}});
    cases.push_back(OpCase{
        .op = "Conv2DBackpropFilter",
        .tag = sp.tag,
        .inputs = {rng.Uniform(sp.dt, sp.x), rng.Uniform(sp.dt, ys), rng.Uniform(sp.dt, sp.w)},
        .build = One([a](const Scope& s, const std::vector<Output>& in) {
          return ops::Conv2DBackpropFilter(s, in[0], in[1], in[2], a);
        }),
        .reference = One([a](const std::vector<Tensor>& in) {
          ConvGeom cg = Conv(in[0].shape(), in[2].shape(), a);
          std::vector<double> x = ToDoubles(in[0]), dy = ToDoubles(in[1]);
          std::vector<double> dw(in[2].num_elements(), 0);
          ForEachTap(cg, [&](int64_t xi, int64_t wi, int64_t yi) { dw[wi] += x[xi] * dy[yi]; });
          return FromDoubles(in[0].dtype(), in[2].shape(), dw);
        }),
        .grad_inputs = {0, 1}});
    if (sp.dt != DType::kF32) continue;
    for (bool relu : {false, true}) {
      cases.push_back(OpCase{
          .op = "_FusedConv2D",
          .tag = sp.tag + (relu ? "_relu" : ""),
          .inputs = {rng.Uniform(sp.dt, sp.x), rng.Uniform(sp.dt, sp.w),
                     rng.Uniform(sp.dt, Shape{g.o})},
          .build = One([a, relu](const Scope& s, const std::vector<Output>& in) {
            return s.OutputOf(s.AddNode("_FusedConv2D", {in[0], in[1], in[2]},
                                        {{"strides", a.strides},
                                         {"pads", a.pads},
                                         {"dilations", a.dilations},
                                         {"groups", a.groups},
                                         {"activation", std::string(relu ? "Relu" : "")}}));
          }),
          .reference = One([a, relu](const std::vector<Tensor>& in) {
            ConvGeom cg = Conv(in[0].shape(), in[1].shape(), a);
            std::vector<double> x = ToDoubles(in[0]), w = ToDoubles(in[1]);
            std::vector<double> y(cg.n * cg.o * cg.oh * cg.ow, 0);
            ForEachTap(cg, [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += x[xi] * w[wi]; });
            int64_t plane = cg.oh * cg.ow;
            for (size_t i = 0; i < y.size(); ++i) {
              y[i] += ElementAsDouble(in[2], (i / plane) % cg.o);
              if (relu && y[i] < 0) y[i] = 0;
            }
            return FromDoubles(in[0].dtype(), Shape{cg.n, cg.o, cg.oh, cg.ow}, y);
          }),
          .no_gradient = "fused ops exist only in compiled plans (no grad_fn)"});
    }
  }
}

// ---- Pooling ----

struct PoolGeom {
  int64_t n, c, h, w, oh, ow;
  ops::PoolAttrs a;
};

PoolGeom Pool(const Shape& x, const ops::PoolAttrs& a) {
  auto out = [&](int d, int64_t in) {
    return std::max<int64_t>(0, (in + a.pads[d] + a.pads[d + 2] - a.ksize[d]) / a.strides[d] + 1);
  };
  return {x[0], x[1], x[2], x[3], out(0, x[2]), out(1, x[3]), a};
}

// Calls f(y_index, window) with the flat input indices of each window, clipped to the input,
// in row-major order, and the offsets (row * kw + col from the unclipped corner) of each.
template <typename F>
void ForEachWindow(const PoolGeom& g, F&& f) {
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j = 0; j < g.ow; ++j) {
        std::vector<int64_t> window, offsets;
        int64_t top = i * g.a.strides[0] - g.a.pads[0], left = j * g.a.strides[1] - g.a.pads[1];
        for (int64_t r = 0; r < g.a.ksize[0]; ++r) {
          for (int64_t s = 0; s < g.a.ksize[1]; ++s) {
            if (top + r < 0 || top + r >= g.h || left + s < 0 || left + s >= g.w) continue;
            window.push_back((p * g.h + top + r) * g.w + left + s);
            offsets.push_back(r * g.a.ksize[1] + s);
          }
        }
        f((p * g.oh + i) * g.ow + j, window, offsets);
      }
    }
  }
}

// The position in `window` of its first maximum.
size_t ArgMaxOf(const std::vector<double>& x, const std::vector<int64_t>& window) {
  size_t best = 0;
  for (size_t k = 1; k < window.size(); ++k) {
    if (x[window[k]] > x[window[best]]) best = k;
  }
  return best;
}

// Max (the first maximum) or average (padding not counted) pooling of x by plain loops.
Tensor PoolReference(const Tensor& in, const ops::PoolAttrs& a, bool max) {
  PoolGeom pg = Pool(in.shape(), a);
  std::vector<double> x = ToDoubles(in), y(pg.n * pg.c * pg.oh * pg.ow);
  ForEachWindow(pg, [&](int64_t yi, const auto& win, const auto&) {
    double sum = 0;
    for (int64_t xi : win) sum += x[xi];
    y[yi] = win.empty() ? 0 : max ? x[win[ArgMaxOf(x, win)]] : sum / win.size();
  });
  return FromDoubles(in.dtype(), Shape{pg.n, pg.c, pg.oh, pg.ow}, y);
}

void AddPooling(CaseRng& rng, std::vector<OpCase>& cases) {
  struct Spec {
    DType dt;
    Shape x;
    ops::PoolAttrs a;
    std::string tag;
  };
  const std::vector<Spec> specs = {
      {DType::kF32, Shape{2, 3, 6, 6}, {}, "k2s2"},
      {DType::kF32,
       Shape{1, 2, 5, 4},
       {.ksize = {3, 2}, .strides = {2, 1}, .pads = {1, 0, 1, 1}},
       "k3x2_pad"},
      {DType::kF32,
       Shape{1, 1, 7, 7},
       {.ksize = {3, 3}, .strides = {1, 1}, .pads = {1, 1, 1, 1}},
       "k3s1p1"},
      {DType::kF32, Shape{1, 1, 5, 5}, {}, "odd"},
      {DType::kF32, Shape{1, 1, 1, 1}, {.ksize = {1, 1}, .strides = {1, 1}}, "unit"},
      {DType::kF64,
       Shape{1, 2, 4, 5},
       {.ksize = {2, 3}, .strides = {1, 2}, .pads = {0, 1, 1, 1}},
       "k2x3"},
  };
  for (const auto& sp : specs) {
    ops::PoolAttrs a = sp.a;
    PoolGeom g = Pool(sp.x, a);
    Shape ys{g.n, g.c, g.oh, g.ow};
    for (bool max : {true, false}) {
      cases.push_back(OpCase{.op = max ? "MaxPool" : "AvgPool",
                             .tag = sp.tag,
                             .inputs = {rng.Distinct(sp.dt, sp.x)},
                             .build = One([a, max](const Scope& s, const std::vector<Output>& in) {
                               return max ? ops::MaxPool(s, in[0], a) : ops::AvgPool(s, in[0], a);
                             }),
                             .reference = One([a, max](const std::vector<Tensor>& in) {
                               return PoolReference(in[0], a, max);
                             })});
      cases.push_back(OpCase{.op = max ? "MaxPoolGrad" : "AvgPoolGrad",
                             .tag = sp.tag,
                             .inputs = {rng.Distinct(sp.dt, sp.x), rng.Uniform(sp.dt, ys)},
                             .build = One([a, max](const Scope& s, const std::vector<Output>& in) {
                               return max ? ops::MaxPoolGrad(s, in[0], in[1], a)
                                          : ops::AvgPoolGrad(s, in[0], in[1], a);
                             }),
                             .reference = One([a, max](const std::vector<Tensor>& in) {
                               PoolGeom pg = Pool(in[0].shape(), a);
                               std::vector<double> x = ToDoubles(in[0]), dy = ToDoubles(in[1]),
                                                   dx(x.size(), 0);
                               ForEachWindow(pg, [&](int64_t yi, const auto& win, const auto&) {
                                 if (win.empty()) return;
                                 if (max) {
                                   dx[win[ArgMaxOf(x, win)]] += dy[yi];
                                 } else {
                                   for (int64_t xi : win) dx[xi] += dy[yi] / win.size();
                                 }
                               });
                               return FromDoubles(in[0].dtype(), in[0].shape(), dx);
                             }),
                             .grad_inputs = {1}});
    }
    AttrMap pool_attrs{{"ksize", a.ksize}, {"strides", a.strides}, {"pads", a.pads}};
    cases.push_back(OpCase{.op = "_MaxPoolWithArgmax",
                           .tag = sp.tag,
                           .inputs = {rng.Distinct(sp.dt, sp.x)},
                           .build =
                               [pool_attrs](const Scope& s, const std::vector<Output>& in) {
                                 int id = s.AddNode("_MaxPoolWithArgmax", {in[0]}, pool_attrs);
                                 return CaseGraph{{s.OutputOf(id, 0), s.OutputOf(id, 1)}, {}};
                               },
                           .reference =
                               [a](const std::vector<Tensor>& in) {
                                 PoolGeom pg = Pool(in[0].shape(), a);
                                 Shape os{pg.n, pg.c, pg.oh, pg.ow};
                                 std::vector<double> x = ToDoubles(in[0]), y(os.num_elements()),
                                                     arg(os.num_elements());
                                 ForEachWindow(
                                     pg, [&](int64_t yi, const auto& win, const auto& offsets) {
                                       size_t k = ArgMaxOf(x, win);
                                       y[yi] = x[win[k]];
                                       arg[yi] = static_cast<double>(offsets[k]);
                                     });
                                 return std::vector<Tensor>{FromDoubles(in[0].dtype(), os, y),
                                                            FromDoubles(DType::kU8, os, arg)};
                               },
                           .no_gradient = "fused ops exist only in compiled plans (no grad_fn)"});
    // Its gradient reads the argmax of some input; y has both signs for the relu mask.
    std::vector<double> x = ToDoubles(rng.Distinct(sp.dt, sp.x));
    std::vector<double> arg(ys.num_elements()), y(ys.num_elements());
    ForEachWindow(g, [&](int64_t yi, const auto& win, const auto& offsets) {
      size_t k = ArgMaxOf(x, win);
      y[yi] = x[win[k]];
      arg[yi] = static_cast<double>(offsets[k]);
    });
    for (bool relu : {false, true}) {
      AttrMap attrs = pool_attrs;
      attrs["input_hw"] = std::vector<int64_t>{g.h, g.w};
      attrs["relu"] = relu;
      cases.push_back(OpCase{
          .op = "_MaxPoolGradWithArgmax",
          .tag = sp.tag + (relu ? "_relu" : ""),
          .inputs = {rng.Uniform(sp.dt, ys), FromDoubles(DType::kU8, ys, arg),
                     FromDoubles(sp.dt, ys, y)},
          .build = One([attrs](const Scope& s, const std::vector<Output>& in) {
            return s.OutputOf(s.AddNode("_MaxPoolGradWithArgmax", {in[0], in[1], in[2]}, attrs));
          }),
          .reference = One([a, g, relu](const std::vector<Tensor>& in) {
            std::vector<double> dy = ToDoubles(in[0]), am = ToDoubles(in[1]), yv = ToDoubles(in[2]);
            std::vector<double> dx(g.n * g.c * g.h * g.w, 0);
            ForEachWindow(g, [&](int64_t yi, const auto& win, const auto& offsets) {
              if (relu && !(yv[yi] > 0)) return;
              for (size_t k = 0; k < win.size(); ++k) {
                if (offsets[k] == static_cast<int64_t>(am[yi])) dx[win[k]] += dy[yi];
              }
            });
            return FromDoubles(in[0].dtype(), Shape{g.n, g.c, g.h, g.w}, dx);
          }),
          .no_gradient = "fused ops exist only in compiled plans (no grad_fn)"});
    }
  }
}

// ---- Softmax and cross-entropy ----

void AddSoftmax(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<std::pair<DType, Shape>> shapes = {
      {DType::kF32, Shape{4, 6}},     {DType::kF32, Shape{257}},  {DType::kF32, Shape{3, 1}},
      {DType::kF32, Shape{2, 3, 33}}, {DType::kF32, Shape{0, 5}}, {DType::kF64, Shape{2, 5}},
  };
  for (bool log : {false, true}) {
    for (const auto& [dt, s] : shapes) {
      cases.push_back(OpCase{.op = log ? "LogSoftmax" : "Softmax",
                             .inputs = {rng.Uniform(dt, s, -4, 4)},
                             .build = One([log](const Scope& sc, const std::vector<Output>& in) {
                               return log ? ops::LogSoftmax(sc, in[0]) : ops::Softmax(sc, in[0]);
                             }),
                             .reference = One([log](const std::vector<Tensor>& in) {
                               const Shape& xs = in[0].shape();
                               int64_t c = xs[xs.rank() - 1],
                                       rows = c ? in[0].num_elements() / c : 0;
                               std::vector<double> x = ToDoubles(in[0]);
                               for (int64_t r = 0; r < rows; ++r) {
                                 double* row = x.data() + r * c;
                                 double top = *std::max_element(row, row + c), total = 0;
                                 for (int64_t j = 0; j < c; ++j) total += std::exp(row[j] - top);
                                 for (int64_t j = 0; j < c; ++j) {
                                   row[j] = log ? row[j] - top - std::log(total)
                                                : std::exp(row[j] - top) / total;
                                 }
                               }
                               return FromDoubles(in[0].dtype(), xs, x);
                             })});
    }
  }
  const std::vector<std::tuple<DType, int64_t, int64_t, DType>> xent = {
      {DType::kF32, 4, 6, DType::kI32},
      {DType::kF32, 1, 1, DType::kI64},
      {DType::kF32, 33, 7, DType::kI64},
      {DType::kF64, 3, 5, DType::kI32},
  };
  for (const auto& [dt, n, c, lt] : xent) {
    cases.push_back(
        OpCase{.op = "SparseSoftmaxCrossEntropyWithLogits",
               .inputs = {rng.Uniform(dt, Shape{n, c}, -4, 4), rng.Ints(lt, Shape{n}, 0, c - 1)},
               .build =
                   [](const Scope& s, const std::vector<Output>& in) {
                     auto r = ops::SparseSoftmaxCrossEntropyWithLogits(s, in[0], in[1]);
                     return CaseGraph{{r.loss, r.backprop}, {}};
                   },
               .reference =
                   [](const std::vector<Tensor>& in) {
                     int64_t rows = in[0].shape()[0], cols = in[0].shape()[1];
                     std::vector<double> x = ToDoubles(in[0]), loss(rows), back(rows * cols);
                     for (int64_t r = 0; r < rows; ++r) {
                       const double* row = x.data() + r * cols;
                       auto label = static_cast<int64_t>(ElementAsDouble(in[1], r));
                       double top = *std::max_element(row, row + cols), total = 0;
                       for (int64_t j = 0; j < cols; ++j) total += std::exp(row[j] - top);
                       loss[r] = std::log(total) + top - row[label];
                       for (int64_t j = 0; j < cols; ++j) {
                         back[r * cols + j] = std::exp(row[j] - top) / total - (j == label ? 1 : 0);
                       }
                     }
                     return std::vector<Tensor>{FromDoubles(in[0].dtype(), Shape{rows}, loss),
                                                FromDoubles(in[0].dtype(), in[0].shape(), back)};
                   },
               .grad_outputs = {0}});
  }
}

// ---- Batch normalisation ----

// Per channel (axis 1) of x: the flat indices of its elements.
std::vector<std::vector<int64_t>> ChannelElements(const Shape& xs) {
  int64_t c = xs[1], inner = 1;
  for (int d = 2; d < xs.rank(); ++d) inner *= xs[d];
  std::vector<std::vector<int64_t>> out(c);
  for (int64_t i = 0; i < xs.num_elements(); ++i) out[(i / inner) % c].push_back(i);
  return out;
}

// The batch mean and biased variance per channel.
std::pair<std::vector<double>, std::vector<double>> Moments(const Tensor& x) {
  auto channels = ChannelElements(x.shape());
  std::vector<double> mean(channels.size(), 0), var(channels.size(), 0);
  for (size_t ch = 0; ch < channels.size(); ++ch) {
    for (int64_t i : channels[ch]) mean[ch] += ElementAsDouble(x, i);
    mean[ch] /= channels[ch].size();
    for (int64_t i : channels[ch]) var[ch] += std::pow(ElementAsDouble(x, i) - mean[ch], 2);
    var[ch] /= channels[ch].size();
  }
  return {mean, var};
}

// y = (x - mean) / sqrt(variance + epsilon) * scale + offset, with the statistics per channel.
Tensor Normalize(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                 const Tensor& scale, const Tensor& offset, double eps) {
  auto channels = ChannelElements(x.shape());
  std::vector<double> y(x.num_elements());
  for (size_t ch = 0; ch < channels.size(); ++ch) {
    double inv = 1 / std::sqrt(var[ch] + eps);
    for (int64_t i : channels[ch]) {
      y[i] = (ElementAsDouble(x, i) - mean[ch]) * inv * ElementAsDouble(scale, ch) +
             ElementAsDouble(offset, ch);
    }
  }
  return FromDoubles(x.dtype(), x.shape(), y);
}

void AddBatchNorm(CaseRng& rng, std::vector<OpCase>& cases) {
  const std::vector<std::tuple<DType, Shape, double>> specs = {
      {DType::kF32, Shape{4, 3}, 1e-5},       {DType::kF32, Shape{2, 3, 4, 5}, 1e-5},
      {DType::kF32, Shape{2, 2, 7}, 1e-3},    {DType::kF32, Shape{1, 2, 1, 2, 3}, 1e-5},
      {DType::kF32, Shape{33, 1}, 1e-5},      {DType::kF64, Shape{3, 2, 2, 2}, 1e-5},
      {DType::kF32, Shape{1, 4, 1, 1}, 1e-5},  // one element per channel: the variance is 0
  };
  for (const auto& [dt, xs, epsilon] : specs) {
    double eps = epsilon;
    Shape cs{xs[1]};
    std::string tag = eps == 1e-5 ? "" : "eps1e_3";
    cases.push_back(
        OpCase{.op = "BatchNorm",
               .tag = tag,
               .inputs = {rng.Uniform(dt, xs), rng.Uniform(dt, cs, 0.5, 2), rng.Uniform(dt, cs)},
               .build =
                   [eps](const Scope& s, const std::vector<Output>& in) {
                     auto bn = ops::BatchNorm(s, in[0], in[1], in[2], {.epsilon = eps});
                     return CaseGraph{{bn.y, bn.mean, bn.variance}, {}};
                   },
               .reference =
                   [eps](const std::vector<Tensor>& in) {
                     auto [mean, var] = Moments(in[0]);
                     DType dt = in[0].dtype();
                     Shape c{in[0].shape()[1]};
                     return std::vector<Tensor>{Normalize(in[0], mean, var, in[1], in[2], eps),
                                                FromDoubles(dt, c, mean), FromDoubles(dt, c, var)};
                   },
               .tolerance = 4,
               .grad_outputs = {0}});
    cases.push_back(OpCase{
        .op = "BatchNormInference",
        .tag = tag,
        .inputs = {rng.Uniform(dt, xs), rng.Uniform(dt, cs, 0.5, 2), rng.Uniform(dt, cs),
                   rng.Uniform(dt, cs), rng.Uniform(dt, cs, 0.5, 2)},
        .build = One([eps](const Scope& s, const std::vector<Output>& in) {
          return ops::BatchNormInference(s, in[0], in[1], in[2], in[3], in[4], {.epsilon = eps});
        }),
        .reference = One([eps](const std::vector<Tensor>& in) {
          return Normalize(in[0], ToDoubles(in[3]), ToDoubles(in[4]), in[1], in[2], eps);
        })});
    // The statistics fed to the gradient are x's own, as in training.
    Tensor x = rng.Uniform(dt, xs);
    auto [mean, var] = Moments(x);
    cases.push_back(OpCase{
        .op = "BatchNormGrad",
        .tag = tag,
        .inputs = {rng.Uniform(dt, xs), x, rng.Uniform(dt, cs, 0.5, 2), FromDoubles(dt, cs, mean),
                   FromDoubles(dt, cs, var)},
        .build =
            [eps](const Scope& s, const std::vector<Output>& in) {
              auto g = ops::BatchNormGrad(s, in[0], in[1], in[2], in[3], in[4], {.epsilon = eps});
              return CaseGraph{{g.dx, g.dscale, g.doffset}, {}};
            },
        .reference =
            [eps](const std::vector<Tensor>& in) {
              const Tensor& dy = in[0];
              const Tensor& xv = in[1];
              auto channels = ChannelElements(xv.shape());
              std::vector<double> dx(xv.num_elements()), dscale(channels.size()),
                  doffset(channels.size());
              for (size_t ch = 0; ch < channels.size(); ++ch) {
                double mu = ElementAsDouble(in[3], ch);
                double inv = 1 / std::sqrt(ElementAsDouble(in[4], ch) + eps);
                double sum_dy = 0, sum_dy_xhat = 0;
                for (int64_t i : channels[ch]) {
                  double xhat = (ElementAsDouble(xv, i) - mu) * inv;
                  sum_dy += ElementAsDouble(dy, i);
                  sum_dy_xhat += ElementAsDouble(dy, i) * xhat;
                }
                auto m = static_cast<double>(channels[ch].size());
                double k = ElementAsDouble(in[2], ch) * inv / m;
                for (int64_t i : channels[ch]) {
                  double xhat = (ElementAsDouble(xv, i) - mu) * inv;
                  dx[i] = k * (m * ElementAsDouble(dy, i) - sum_dy - xhat * sum_dy_xhat);
                }
                dscale[ch] = sum_dy_xhat;
                doffset[ch] = sum_dy;
              }
              DType dt = dy.dtype();
              Shape c{static_cast<int64_t>(channels.size())};
              return std::vector<Tensor>{FromDoubles(dt, xv.shape(), dx),
                                         FromDoubles(dt, c, dscale), FromDoubles(dt, c, doffset)};
            },
        .tolerance = 4});
  }
}

// ---- Blocked channel layouts and the fused normalisation (rewrite/channel_blocks.h, ----
// ---- rewrite/subgraph_fusion.h): ops that exist only in compiled plans              ----

constexpr char kPlanOnly[] = "fused ops exist only in compiled plans (no grad_fn)";
constexpr int64_t kBlock = 8;  // every CPU with a blocked layout has nChw8c

// Plain [n, c, h, w] values in the blocked layout [n, ceil(c / b), h, w, b], padding 0.
std::vector<double> ToBlocked(const std::vector<double>& x, const Shape& s, int64_t b) {
  const int64_t n = s[0], c = s[1], hw = s[2] * s[3], cb = (c + b - 1) / b;
  std::vector<double> y(n * cb * hw * b, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t p = 0; p < hw; ++p) {
        y[((i * cb + ch / b) * hw + p) * b + ch % b] = x[(i * c + ch) * hw + p];
      }
    }
  }
  return y;
}

Shape BlockedShape(const Shape& s, int64_t b) { return {s[0], (s[1] + b - 1) / b, s[2], s[3], b}; }

Output Block(const Scope& s, Output x) {
  return s.OutputOf(s.AddNode("_BlockChannels", {x}, {{"block", kBlock}}));
}
Output Unblock(const Scope& s, Output x, int64_t channels) {
  return s.OutputOf(s.AddNode("_UnblockChannels", {x}, {{"channels", channels}}));
}

void AddBlockedLayouts(CaseRng& rng, std::vector<OpCase>& cases) {
  const Shape plain{2, 20, 3, 3};
  cases.push_back(OpCase{
      .op = "_BlockChannels",
      .inputs = {rng.Uniform(DType::kF32, plain)},
      .build = One([](const Scope& s, const std::vector<Output>& in) { return Block(s, in[0]); }),
      .reference = One([](const std::vector<Tensor>& in) {
        const Shape& xs = in[0].shape();
        return FromDoubles(DType::kF32, BlockedShape(xs, kBlock),
                           ToBlocked(ToDoubles(in[0]), xs, kBlock));
      }),
      .no_gradient = kPlanOnly});
  // The padding channels of a blocked input hold anything: they are not read.
  cases.push_back(OpCase{
      .op = "_UnblockChannels",
      .inputs = {rng.Uniform(DType::kF32, BlockedShape(plain, kBlock))},
      .build =
          One([](const Scope& s, const std::vector<Output>& in) { return Unblock(s, in[0], 20); }),
      .reference = One([](const std::vector<Tensor>& in) {
        const Shape& bs = in[0].shape();
        std::vector<double> x = ToDoubles(in[0]), y;
        const int64_t hw = bs[2] * bs[3];
        for (int64_t n = 0; n < bs[0]; ++n) {
          for (int64_t c = 0; c < 20; ++c) {
            for (int64_t p = 0; p < hw; ++p) {
              y.push_back(x[((n * bs[1] + c / kBlock) * hw + p) * kBlock + c % kBlock]);
            }
          }
        }
        return FromDoubles(DType::kF32, Shape{bs[0], 20, bs[2], bs[3]}, y);
      }),
      .no_gradient = kPlanOnly});

  struct ConvCase {
    Shape x, w;
    ops::Conv2DAttrs a;
    bool x_blocked, residual;
    std::string activation;
    double lo, hi;
    std::string tag;
  };
  const std::vector<ConvCase> convs = {
      {{2, 12, 7, 7},
       {20, 12, 3, 3},
       {.pads = {1, 1, 1, 1}},
       true,
       true,
       "Relu",
       0,
       0,
       "relu_residual"},
      {{1, 16, 6, 6},
       {16, 1, 3, 3},
       {.strides = {2, 2}, .pads = {1, 1, 1, 1}, .groups = 16},
       true,
       false,
       "Clip",
       -0.5,
       1.5,
       "depthwise_clip"},
      {{1, 3, 8, 8}, {8, 3, 3, 3}, {.pads = {0, 1, 2, 1}}, false, false, "", 0, 0, "plain_x"},
  };
  for (const auto& cc : convs) {
    ConvGeom g = Conv(cc.x, cc.w, cc.a);
    const Shape ys{g.n, g.o, g.oh, g.ow};
    std::vector<Tensor> inputs = {rng.Uniform(DType::kF32, cc.x), rng.Uniform(DType::kF32, cc.w),
                                  rng.Uniform(DType::kF32, Shape{g.o})};
    if (cc.residual) inputs.push_back(rng.Uniform(DType::kF32, ys));
    cases.push_back(OpCase{
        .op = "_BlockedConv2D",
        .tag = cc.tag,
        .inputs = inputs,
        .build = One([cc, o = g.o](const Scope& s, const std::vector<Output>& in) {
          std::vector<Output> args = {cc.x_blocked ? Block(s, in[0]) : in[0], in[1], in[2]};
          if (cc.residual) args.push_back(Block(s, in[3]));
          Output y = s.OutputOf(s.AddNode("_BlockedConv2D", args,
                                          {{"strides", cc.a.strides},
                                           {"pads", cc.a.pads},
                                           {"dilations", cc.a.dilations},
                                           {"groups", cc.a.groups},
                                           {"block", kBlock},
                                           {"x_blocked", cc.x_blocked},
                                           {"activation", cc.activation},
                                           {"clip_min", cc.lo},
                                           {"clip_max", cc.hi}}));
          return Unblock(s, y, o);
        }),
        .reference = One([cc](const std::vector<Tensor>& in) {
          ConvGeom cg = Conv(in[0].shape(), in[1].shape(), cc.a);
          std::vector<double> x = ToDoubles(in[0]), w = ToDoubles(in[1]);
          std::vector<double> y(cg.n * cg.o * cg.oh * cg.ow, 0);
          ForEachTap(cg, [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += x[xi] * w[wi]; });
          const int64_t plane = cg.oh * cg.ow;
          for (size_t i = 0; i < y.size(); ++i) {
            y[i] += ElementAsDouble(in[2], (i / plane) % cg.o);
            if (cc.residual) y[i] += ElementAsDouble(in[3], i);
            if (cc.activation == "Relu") y[i] = std::max(y[i], 0.0);
            if (cc.activation == "Clip") y[i] = std::min(std::max(y[i], cc.lo), cc.hi);
          }
          return FromDoubles(DType::kF32, Shape{cg.n, cg.o, cg.oh, cg.ow}, y);
        }),
        .no_gradient = kPlanOnly});
  }

  // _BlockedConvDw: an expanding 1x1 convolution, its activation, a depthwise 3x3 one of
  // stride 1 or 2 (padding 1), its activation; against the two convolutions by loops.
  for (const auto& [stride, act, dw_act, tag] :
       std::vector<std::tuple<int64_t, std::string, std::string, std::string>>{
           {1, "Clip", "Clip", "s1_clip"},
           {2, "Relu", "", "s2_relu"},
           {2, "Clip", "Clip", "s2_clip"}}) {
    const Shape xs{2, 16, 9, 9}, ws{32, 16, 1, 1}, dws{32, 1, 3, 3};
    const ops::Conv2DAttrs a1{},
        a2{.strides = {stride, stride}, .pads = {1, 1, 1, 1}, .groups = 32};
    cases.push_back(OpCase{
        .op = "_BlockedConvDw",
        .tag = tag,
        .inputs = {rng.Uniform(DType::kF32, xs), rng.Uniform(DType::kF32, ws),
                   rng.Uniform(DType::kF32, Shape{32}), rng.Uniform(DType::kF32, dws),
                   rng.Uniform(DType::kF32, Shape{32})},
        .build = One([stride, act, dw_act](const Scope& s, const std::vector<Output>& in) {
          Output y =
              s.OutputOf(s.AddNode("_BlockedConvDw", {Block(s, in[0]), in[1], in[2], in[3], in[4]},
                                   {{"strides", std::vector<int64_t>{1, 1}},
                                    {"pads", std::vector<int64_t>{0, 0, 0, 0}},
                                    {"dilations", std::vector<int64_t>{1, 1}},
                                    {"groups", int64_t{1}},
                                    {"block", kBlock},
                                    {"x_blocked", true},
                                    {"activation", act},
                                    {"clip_min", 0.0},
                                    {"clip_max", 0.5},
                                    {"dw_stride", stride},
                                    {"dw_activation", dw_act},
                                    {"dw_clip_min", -0.25},
                                    {"dw_clip_max", 0.25}}));
          return Unblock(s, y, 32);
        }),
        .reference = One([a1, a2, act, dw_act](const std::vector<Tensor>& in) {
          auto conv = [](const Shape& xs, const std::vector<double>& x, const Tensor& w,
                         const Tensor& bias, const ops::Conv2DAttrs& a, const std::string& act,
                         double lo, double hi, Shape* ys) {
            ConvGeom cg = Conv(xs, w.shape(), a);
            std::vector<double> wv = ToDoubles(w), y(cg.n * cg.o * cg.oh * cg.ow, 0);
            ForEachTap(cg, [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += x[xi] * wv[wi]; });
            const int64_t plane = cg.oh * cg.ow;
            for (size_t i = 0; i < y.size(); ++i) {
              y[i] += ElementAsDouble(bias, (i / plane) % cg.o);
              if (act == "Relu") y[i] = std::max(y[i], 0.0);
              if (act == "Clip") y[i] = std::min(std::max(y[i], lo), hi);
            }
            *ys = Shape{cg.n, cg.o, cg.oh, cg.ow};
            return y;
          };
          Shape mid, out;
          std::vector<double> e =
              conv(in[0].shape(), ToDoubles(in[0]), in[1], in[2], a1, act, 0.0, 0.5, &mid);
          std::vector<double> y = conv(mid, e, in[3], in[4], a2, dw_act, -0.25, 0.25, &out);
          return FromDoubles(DType::kF32, out, y);
        }),
        .no_gradient = kPlanOnly});
  }

  for (const auto& [k, st, pads, tag] :
       std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>,
                              std::string>>{{{2, 2}, {2, 2}, {0, 0, 0, 0}, "k2s2"},
                                            {{3, 3}, {2, 2}, {1, 1, 1, 1}, "k3s2p1"}}) {
    ops::PoolAttrs a{.ksize = k, .strides = st, .pads = pads};
    for (bool max : {true, false}) {
      const Shape xs{2, 12, 7, 7};
      cases.push_back(OpCase{
          .op = max ? "_BlockedMaxPool" : "_BlockedAvgPool",
          .tag = tag,
          .inputs = {rng.Distinct(DType::kF32, xs)},
          .build = One([a, max](const Scope& s, const std::vector<Output>& in) {
            Output y =
                s.OutputOf(s.AddNode(max ? "_BlockedMaxPool" : "_BlockedAvgPool", {Block(s, in[0])},
                                     {{"ksize", a.ksize},
                                      {"strides", a.strides},
                                      {"pads", a.pads},
                                      {"channels", int64_t{12}}}));
            return Unblock(s, y, 12);
          }),
          .reference =
              One([a, max](const std::vector<Tensor>& in) { return PoolReference(in[0], a, max); }),
          .no_gradient = kPlanOnly});
    }
  }

  cases.push_back(OpCase{
      .op = "_LayerNorm",
      .inputs = {rng.Uniform(DType::kF32, Shape{3, 4, 10}), rng.Uniform(DType::kF32, Shape{10}),
                 rng.Uniform(DType::kF32, Shape{10})},
      .build = One([](const Scope& s, const std::vector<Output>& in) {
        return s.OutputOf(s.AddNode("_LayerNorm", {in[0], in[1], in[2]}, {{"epsilon", 1e-3}}));
      }),
      .reference = One([](const std::vector<Tensor>& in) {
        std::vector<double> x = ToDoubles(in[0]), g = ToDoubles(in[1]), b = ToDoubles(in[2]);
        const size_t k = g.size();
        std::vector<double> y(x.size());
        for (size_t r = 0; r < x.size() / k; ++r) {
          double mean = 0, var = 0;
          for (size_t j = 0; j < k; ++j) mean += x[r * k + j] / k;
          for (size_t j = 0; j < k; ++j) var += (x[r * k + j] - mean) * (x[r * k + j] - mean) / k;
          for (size_t j = 0; j < k; ++j) {
            y[r * k + j] = (x[r * k + j] - mean) / std::sqrt(var + 1e-3) * g[j] + b[j];
          }
        }
        return FromDoubles(DType::kF32, in[0].shape(), y);
      }),
      .no_gradient = kPlanOnly});
}

// _Attention's reference: softmax_j(alpha * q_h . k_h + mask) v_h for every batch, query and
// head, by loops over the heads' columns of the rows (ops/attention_dims.h), in double.
Tensor AttentionReference(const std::vector<Tensor>& in, const AttentionAttrs& a, double alpha) {
  const Shape &qs = in[0].shape(), &ks = in[1].shape(), &vs = in[2].shape(), &ms = in[3].shape();
  const int64_t b = qs[0], s = qs[1], sk = ks[1], h = a.heads, d = a.head_dim, dv = a.value_dim;
  const int64_t wq = qs.num_elements() / std::max<int64_t>(1, b * s);
  const int64_t wk = ks.num_elements() / std::max<int64_t>(1, b * sk);
  const int64_t wv = vs.num_elements() / std::max<int64_t>(1, b * sk);
  const std::vector<double> q = ToDoubles(in[0]);
  const std::vector<double> k = ToDoubles(in[1]);
  const std::vector<double> v = ToDoubles(in[2]);
  const std::vector<double> m = ToDoubles(in[3]);
  // The mask's element for scores index (bi, hi, si, j), its dimensions from the last.
  auto mask_at = [&](int64_t bi, int64_t hi, int64_t si, int64_t j) {
    const int64_t idx[4] = {bi, hi, si, j};
    int64_t at = 0, step = 1;
    for (int dim = 1; dim <= ms.rank(); ++dim) {
      const int64_t size = ms[ms.rank() - dim];
      at += (size == 1 ? 0 : idx[4 - dim]) * step;
      step *= size;
    }
    return m[at];
  };
  std::vector<double> y(b * s * h * dv, 0.0), p(sk);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s; ++si) {
      for (int64_t hi = 0; hi < h; ++hi) {
        double top = -INFINITY;
        for (int64_t j = 0; j < sk; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += q[(bi * s + si) * wq + a.q_col + hi * d + c] *
                   k[(bi * sk + j) * wk + a.k_col + hi * d + c];
          }
          p[j] = alpha * dot + mask_at(bi, hi, si, j);
          top = std::max(top, p[j]);
        }
        double total = 0;
        for (int64_t j = 0; j < sk; ++j) total += p[j] = std::exp(p[j] - top);
        for (int64_t e = 0; e < dv; ++e) {
          double sum = 0;
          for (int64_t j = 0; j < sk; ++j) {
            sum += p[j] / total * v[(bi * sk + j) * wv + a.v_col + hi * dv + e];
          }
          y[((bi * s + si) * h + hi) * dv + e] = sum;
        }
      }
    }
  }
  return FromDoubles(DType::kF32, Shape{b, s, h, dv}, y);
}

// _Attention (the fused self-attention of rewrite/subgraph_fusion.h): heads read from one
// projection [B, S, 3 * H] at three offsets, or from q, k and v of their own with more keys
// than queries, values wider than keys and a mask over every score; no keys at all.
void AddAttention(CaseRng& rng, std::vector<OpCase>& cases) {
  struct Attn {
    std::string tag;
    bool packed;
    Shape q, k, v, mask;
    AttentionAttrs attrs;
    double alpha;
  };
  const std::vector<Attn> all = {
      {"packed", true, Shape{2, 5, 36}, {}, {}, Shape{2, 1, 1, 5}, {3, 4, 4, 0, 12, 24}, 0.5},
      {"cross",
       false,
       Shape{2, 5, 3, 4},
       Shape{2, 7, 3, 4},
       Shape{2, 7, 3, 6},
       Shape{2, 3, 5, 7},
       {3, 4, 6, 0, 0, 0},
       0.25},
      {"row_mask",
       false,
       Shape{1, 9, 2, 8},
       Shape{1, 9, 2, 8},
       Shape{1, 9, 2, 8},
       Shape{9},
       {2, 8, 8, 0, 0, 0},
       1.0},
      {"no_keys",
       false,
       Shape{1, 3, 2, 4},
       Shape{1, 0, 2, 4},
       Shape{1, 0, 2, 3},
       Shape{1, 1, 1, 0},
       {2, 4, 3, 0, 0, 0},
       1.0},
  };
  for (const Attn& t : all) {
    std::vector<Tensor> inputs = {rng.Uniform(DType::kF32, t.q)};
    if (!t.packed) {
      inputs.push_back(rng.Uniform(DType::kF32, t.k));
      inputs.push_back(rng.Uniform(DType::kF32, t.v));
    }
    inputs.push_back(rng.Uniform(DType::kF32, t.mask, -3, 0));
    const AttentionAttrs a = t.attrs;
    const bool packed = t.packed;
    const double alpha = t.alpha;
    cases.push_back(OpCase{
        .op = "_Attention",
        .tag = t.tag,
        .inputs = std::move(inputs),
        .build = One([a, packed, alpha](const Scope& s, const std::vector<Output>& in) {
          std::vector<Output> args = packed ? std::vector<Output>{in[0], in[0], in[0], in[1]} : in;
          return s.OutputOf(s.AddNode("_Attention", args,
                                      {{"heads", a.heads},
                                       {"head_dim", a.head_dim},
                                       {"value_dim", a.value_dim},
                                       {"q_col", a.q_col},
                                       {"k_col", a.k_col},
                                       {"v_col", a.v_col},
                                       {"alpha", alpha}}));
        }),
        .reference = One([a, packed, alpha](const std::vector<Tensor>& in) {
          return AttentionReference(packed ? std::vector<Tensor>{in[0], in[0], in[0], in[1]} : in,
                                    a, alpha);
        }),
        .no_gradient = kPlanOnly});
  }
}
}  // namespace

void AddNnCases(CaseRng& rng, std::vector<OpCase>& cases) {
  AddConvolutions(rng, cases);
  AddPooling(rng, cases);
  AddBlockedLayouts(rng, cases);
  AddSoftmax(rng, cases);
  AddBatchNorm(rng, cases);
  AddAttention(rng, cases);
}

}  // namespace dflow::conformance
