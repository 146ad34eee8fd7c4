// CPU kernels of MaxPool, AvgPool and their gradients on NCHW. The f32 forward passes run on
// oneDNN's pooling primitive; f64 and the gradients run on loops. Windows are clipped to the
// input: padding never wins a max and is not counted in an average. MaxPoolGrad recomputes each
// window's first maximum and routes the gradient there.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/dnnl_context.h"
#include "ops/cpu/nan_aware.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/primitive_cache.h"

namespace dflow::cpu {
namespace {

struct Pool {
  int64_t n, c, h, w, kh, kw, sh, sw, pt, pl, oh, ow;

  // Calls f(plane_offset, out_index, row_begin, row_end, col_begin, col_end) per output element.
  // Planes (one image channel each) are independent and run in parallel.
  template <typename F>
  void ForEachWindow(F&& f) const {
    int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, oh * ow * kh * kw));
    ParallelFor(n * c, grain, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) Plane(p, f);
    });
  }

  template <typename F>
  void Plane(int64_t p, F& f) const {
    for (int64_t y = 0; y < oh; ++y) {
      int64_t r0 = std::max<int64_t>(y * sh - pt, 0), r1 = std::min(y * sh - pt + kh, h);
      for (int64_t x = 0; x < ow; ++x) {
        int64_t c0 = std::max<int64_t>(x * sw - pl, 0), c1 = std::min(x * sw - pl + kw, w);
        f(p * h * w, (p * oh + y) * ow + x, r0, r1, c0, c1);
      }
    }
  }
};

enum class Kind { kMax, kAvg, kMaxGrad, kAvgGrad };

// A kernel with a pooling window: ksize, strides and pads (top, left, bottom, right).
class WindowKernel : public OpKernel {
 public:
  explicit WindowKernel(const KernelInit& init)
      : k_(std::get<std::vector<int64_t>>(*init.node.FindAttr("ksize"))),
        s_(std::get<std::vector<int64_t>>(*init.node.FindAttr("strides"))),
        pads_(std::get<std::vector<int64_t>>(*init.node.FindAttr("pads"))) {}

 protected:
  // The output size along spatial dimension d (0: height, 1: width) of an input of size `in`.
  int64_t OutSize(int d, int64_t in) const {
    return std::max<int64_t>(0, (in + pads_[d] + pads_[d + 2] - k_[d]) / s_[d] + 1);
  }

  // oneDNN's forward max (or average, padding not counted) pooling for f32 of x (`src`) into y
  // (`dst`), from the shared PrimitiveCache under `key` (which must name the layouts).
  Status RunDnnl(KernelContext& ctx, bool max, const std::string& key,
                 const dnnl::memory::desc& src, const dnnl::memory::desc& dst, void* x,
                 void* y) const {
    struct Prim {
      dnnl::pooling_forward prim;
      dnnl::memory::desc scratch;
    };
    auto p = PrimitiveCache::Global().GetOrCreate<Prim>(
        fmt::format("{}:{}:{}:{}:{}", key, max, fmt::join(k_, ","), fmt::join(s_, ","),
                    fmt::join(pads_, ",")),
        [&] {
          dnnl::primitive_attr attr;
          attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
          auto alg =
              max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
          dnnl::pooling_forward::primitive_desc pd(
              dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference, alg, src, dst,
                                          {s_[0], s_[1]}, {k_[0], k_[1]}, {pads_[0], pads_[1]},
                                          {pads_[2], pads_[3]}),
              attr, CpuEngine());
          return std::make_shared<const Prim>(
              Prim{dnnl::pooling_forward(pd), pd.scratchpad_desc()});
        });
    const auto& e = CpuEngine();
    TempBuffers temp(ctx.allocator());
    ASSIGN_OR_RETURN(void* scratch_data, temp.Get(p->scratch.get_size()));
    dnnl::memory xm(src, e, x), ym(dst, e, y), sm(p->scratch, e, scratch_data);
    dnnl::stream& stream = ThreadStream();
    p->prim.execute(stream, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DST, ym}, {DNNL_ARG_SCRATCHPAD, sm}});
    stream.wait();
    return Status::OK();
  }

  std::vector<int64_t> k_, s_, pads_;
};

template <Kind kKind>
class PoolKernel : public WindowKernel {
 public:
  explicit PoolKernel(const KernelInit& init) : WindowKernel(init) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& xs = x.shape();
    if (xs.rank() != 4) return InvalidArgument("input must be NCHW (rank 4), got {}", xs);
    Pool p{xs[0], xs[1], xs[2], xs[3], k_[0], k_[1], s_[0], s_[1], pads_[0], pads_[1], 0, 0};
    p.oh = OutSize(0, p.h);
    p.ow = OutSize(1, p.w);
    Shape ys{p.n, p.c, p.oh, p.ow};
    constexpr bool kGrad = kKind == Kind::kMaxGrad || kKind == Kind::kAvgGrad;
    if (kGrad && ctx.input(1).shape() != ys) {
      return InvalidArgument("output gradient {} does not match the pooling output {}",
                             ctx.input(1).shape(), ys);
    }
    if constexpr (!kGrad) {
      // oneDNN's max pooling drops NaN: inputs with one take the loops.
      if (x.dtype() == DType::kF32 && ys.num_elements() > 0 &&
          (kKind != Kind::kMax || AllFiniteParallel(x.data<float>(), x.num_elements()))) {
        ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), ys));
        using dnnl::memory;
        return RunDnnl(
            ctx, kKind == Kind::kMax, fmt::format("pool:{}", fmt::join(xs.dim_vector(), ",")),
            memory::desc(xs.dim_vector(), memory::data_type::f32, memory::format_tag::nchw),
            memory::desc(ys.dim_vector(), memory::data_type::f32, memory::format_tag::nchw),
            x.raw_data(), out->raw_data());
      }
    }
    return DispatchFloat(x.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, x.dtype(), kGrad ? xs : ys));
      const T* px = x.data<T>();
      T* po = out->data<T>();
      if constexpr (kGrad) std::memset(po, 0, out->num_bytes());
      const T* dy = kGrad ? ctx.input(1).data<T>() : nullptr;
      p.ForEachWindow(
          [&](int64_t plane, int64_t yi, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
            const T* in = px + plane;
            if constexpr (kKind == Kind::kMax || kKind == Kind::kMaxGrad) {
              T best = -std::numeric_limits<T>::infinity();
              int64_t arg = -1;
              for (int64_t r = r0; r < r1; ++r) {
                for (int64_t c = c0; c < c1; ++c) {
                  if (TakesMax(in[r * p.w + c], best) || arg < 0) {
                    best = in[r * p.w + c];
                    arg = r * p.w + c;
                  }
                }
              }
              if constexpr (kKind == Kind::kMax) {
                po[yi] = best;
              } else if (arg >= 0) {
                po[plane + arg] += dy[yi];
              }
            } else {
              int64_t count = (r1 - r0) * (c1 - c0);
              if constexpr (kKind == Kind::kAvg) {
                T sum = 0;
                for (int64_t r = r0; r < r1; ++r) {
                  for (int64_t c = c0; c < c1; ++c) sum += in[r * p.w + c];
                }
                po[yi] = count > 0 ? sum / static_cast<T>(count) : T(0);
              } else if (count > 0) {
                T share = dy[yi] / static_cast<T>(count);
                for (int64_t r = r0; r < r1; ++r) {
                  for (int64_t c = c0; c < c1; ++c) po[plane + r * p.w + c] += share;
                }
              }
            }
          });
      return Status::OK();
    });
  }
};

// _MaxPoolWithArgmax: the max of each window and its offset in the window (row * kw + col,
// counted from the window's unclipped corner), as u8.
class MaxPoolArgmaxKernel : public WindowKernel {
 public:
  explicit MaxPoolArgmaxKernel(const KernelInit& init) : WindowKernel(init) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& xs = x.shape();
    if (xs.rank() != 4) return InvalidArgument("input must be NCHW (rank 4), got {}", xs);
    int64_t h = xs[2], w = xs[3];
    int64_t oh = OutSize(0, h), ow = OutSize(1, w);
    Shape ys{xs[0], xs[1], oh, ow};
    return DispatchFloat(x.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * y, ctx.AllocateOutput(0, x.dtype(), ys));
      ASSIGN_OR_RETURN(Tensor * arg, ctx.AllocateOutput(1, DType::kU8, ys));
      const T* px = x.data<T>();
      T* py = y->data<T>();
      uint8_t* pa = arg->data<uint8_t>();
      int64_t planes = xs[0] * xs[1];
      int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, h * w));
      ParallelFor(planes, grain, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          const T* in = px + p * h * w;
          for (int64_t i = 0; i < oh; ++i) {
            int64_t top = i * s_[0] - pads_[0];
            int64_t r0 = std::max<int64_t>(top, 0), r1 = std::min(top + k_[0], h);
            for (int64_t j = 0; j < ow; ++j) {
              int64_t left = j * s_[1] - pads_[1];
              int64_t c0 = std::max<int64_t>(left, 0), c1 = std::min(left + k_[1], w);
              T best = -std::numeric_limits<T>::infinity();
              int64_t at = -1;
              for (int64_t r = r0; r < r1; ++r) {
                for (int64_t c = c0; c < c1; ++c) {
                  if (TakesMax(in[r * w + c], best) || at < 0) {
                    best = in[r * w + c];
                    at = (r - top) * k_[1] + (c - left);
                  }
                }
              }
              int64_t o = (p * oh + i) * ow + j;
              py[o] = best;
              pa[o] = static_cast<uint8_t>(std::max<int64_t>(at, 0));
            }
          }
        }
      });
      return Status::OK();
    });
  }
};

// _MaxPoolGradWithArgmax: dy routed to each window's recorded maximum; with relu, only where
// the pooled value y is > 0.
class MaxPoolGradArgmaxKernel : public WindowKernel {
 public:
  explicit MaxPoolGradArgmaxKernel(const KernelInit& init)
      : WindowKernel(init),
        hw_(std::get<std::vector<int64_t>>(*init.node.FindAttr("input_hw"))),
        relu_(std::get<bool>(*init.node.FindAttr("relu"))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& arg = ctx.input(1);
    const Tensor& y = ctx.input(2);
    const Shape& ds = dy.shape();
    int64_t h = hw_[0], w = hw_[1];
    if (ds.rank() != 4 || arg.shape() != ds || y.shape() != ds || ds[2] != OutSize(0, h) ||
        ds[3] != OutSize(1, w)) {
      return InvalidArgument("dy {}, argmax {} and y {} do not match a pooling of [{}, {}]", ds,
                             arg.shape(), y.shape(), h, w);
    }
    int64_t oh = ds[2], ow = ds[3];
    return DispatchFloat(dy.dtype(), [&]<typename T>() -> Status {
      ASSIGN_OR_RETURN(Tensor * dx, ctx.AllocateOutput(0, dy.dtype(), Shape{ds[0], ds[1], h, w}));
      T* out = dx->data<T>();
      const T* g = dy.data<T>();
      const T* py = y.data<T>();
      const uint8_t* pa = arg.data<uint8_t>();
      int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, h * w));
      ParallelFor(ds[0] * ds[1], grain, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          T* plane = out + p * h * w;
          std::memset(plane, 0, sizeof(T) * h * w);
          for (int64_t i = 0; i < oh; ++i) {
            for (int64_t j = 0; j < ow; ++j) {
              int64_t o = (p * oh + i) * ow + j;
              if (relu_ && !(py[o] > T(0))) continue;
              int64_t r = i * s_[0] - pads_[0] + pa[o] / k_[1];
              int64_t c = j * s_[1] - pads_[1] + pa[o] % k_[1];
              if (r >= 0 && r < h && c >= 0 && c < w) plane[r * w + c] += g[o];
            }
          }
        }
      });
      return Status::OK();
    });
  }

 private:
  std::vector<int64_t> hw_;
  bool relu_;
};

}  // namespace

// _BlockedMaxPool and _BlockedAvgPool: pooling of a blocked tensor [N, C/b, H, W, b]
// (rewrite/channel_blocks.h) into one, on oneDNN's pooling in nChw{b}c; max pooling of an input
// with a NaN takes a loop that keeps it.
template <Kind kKind>
class BlockedPoolKernel : public WindowKernel {
  // A maximum of inputs bounded by `bound` is bounded by it; so is a mean, but for the rounding
  // of its sum (at most 2 units of the last place per element), which must not overflow.
  float PooledBound(float bound) const {
    if (kKind == Kind::kMax) return bound;
    const double window = static_cast<double>(k_[0]) * k_[1];
    if (!(bound * window < std::numeric_limits<float>::max() / 2)) {
      return std::numeric_limits<float>::infinity();
    }
    return std::nextafter(static_cast<float>(bound * (1 + 2 * window * 0x1p-24)),
                          std::numeric_limits<float>::infinity());
  }

 public:
  explicit BlockedPoolKernel(const KernelInit& init)
      : WindowKernel(init), channels_(std::get<int64_t>(*init.node.FindAttr("channels"))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& xs = x.shape();
    const int64_t b = xs.rank() == 5 ? xs[4] : 0;
    if ((b != 8 && b != 16) || xs[1] != (channels_ + b - 1) / b) {
      return InvalidArgument("input {} is not the blocked layout of {} channels", xs, channels_);
    }
    const int64_t oh = OutSize(0, xs[2]), ow = OutSize(1, xs[3]);
    ASSIGN_OR_RETURN(Tensor * out,
                     ctx.AllocateOutput(0, DType::kF32, Shape{xs[0], xs[1], oh, ow, b}));
    if (out->num_elements() == 0) return Status::OK();
    // Every window holds an input (no window lies in the padding alone), so a bound of the
    // inputs bounds the maxima and the means; a bounded input also needs no check for NaN.
    const bool windows_hold_inputs =
        pads_[0] < k_[0] && pads_[1] < k_[1] && pads_[2] < k_[0] && pads_[3] < k_[1];
    if (kKind == Kind::kAvg || x.known_finite() ||
        AllFiniteParallel(x.data<float>(), x.num_elements())) {
      using dnnl::memory;
      const memory::format_tag tag =
          b == 16 ? memory::format_tag::nChw16c : memory::format_tag::nChw8c;
      RETURN_IF_ERROR(
          RunDnnl(ctx, kKind == Kind::kMax,
                  fmt::format("blocked_pool:{}:{}", fmt::join(xs.dim_vector(), ","), channels_),
                  memory::desc({xs[0], channels_, xs[2], xs[3]}, memory::data_type::f32, tag),
                  memory::desc({xs[0], channels_, oh, ow}, memory::data_type::f32, tag),
                  x.raw_data(), out->raw_data()));
      if (windows_hold_inputs) out->set_known_bound(PooledBound(x.known_bound()));
      return Status::OK();
    }
    // [n, cb] planes of H x W x b in parallel.
    const float* px = x.data<float>();
    float* po = out->data<float>();
    const int64_t h = xs[2], w = xs[3];
    ParallelFor(xs[0] * xs[1], 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const float* in = px + p * h * w * b;
        for (int64_t i = 0; i < oh; ++i) {
          const int64_t r0 = std::max<int64_t>(i * s_[0] - pads_[0], 0),
                        r1 = std::min(i * s_[0] - pads_[0] + k_[0], h);
          for (int64_t j = 0; j < ow; ++j) {
            const int64_t c0 = std::max<int64_t>(j * s_[1] - pads_[1], 0),
                          c1 = std::min(j * s_[1] - pads_[1] + k_[1], w);
            float* o = po + ((p * oh + i) * ow + j) * b;
            for (int64_t lane = 0; lane < b; ++lane) {
              float best = -std::numeric_limits<float>::infinity();
              for (int64_t r = r0; r < r1; ++r) {
                for (int64_t c = c0; c < c1; ++c) {
                  const float v = in[(r * w + c) * b + lane];
                  if (TakesMax(v, best)) best = v;
                }
              }
              o[lane] = best;
            }
          }
        }
      }
    });
    return Status::OK();
  }

 private:
  const int64_t channels_;
};

Status RegisterPoolKernels() {
  RETURN_IF_ERROR(RegisterKernel<BlockedPoolKernel<Kind::kMax>>("_BlockedMaxPool", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BlockedPoolKernel<Kind::kAvg>>("_BlockedAvgPool", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<MaxPoolArgmaxKernel>("_MaxPoolWithArgmax", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<MaxPoolGradArgmaxKernel>("_MaxPoolGradWithArgmax", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<PoolKernel<Kind::kMax>>("MaxPool", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<PoolKernel<Kind::kAvg>>("AvgPool", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<PoolKernel<Kind::kMaxGrad>>("MaxPoolGrad", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<PoolKernel<Kind::kAvgGrad>>("AvgPoolGrad", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
