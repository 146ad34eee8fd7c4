// CPU kernels of Resize and ResizeGrad: every mode is separable, so each axis is resampled in
// turn with the taps (input index, weight) of its output positions, and the gradient spreads
// back through the same taps, axes in reverse.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"

namespace dflow::cpu {
namespace {

struct ResizeConfig {
  std::string mode, transform, nearest;
  double cubic_a, extrapolation;
  bool exclude_outside;
};

ResizeConfig ConfigOf(const KernelInit& init) {
  const Node& n = init.node;
  return {*n.GetAttr<std::string>("mode"),
          *n.GetAttr<std::string>("coordinate_transformation_mode"),
          *n.GetAttr<std::string>("nearest_mode"),
          *n.GetAttr<double>("cubic_coeff_a"),
          *n.GetAttr<double>("extrapolation_value"),
          *n.GetAttr<int64_t>("exclude_outside") != 0};
}

// One axis: for each output position, `per` taps (clamped input index, weight), or none when it
// lies outside the crop (tf_crop_and_resize: the extrapolation value).
struct AxisTaps {
  int64_t in = 0, out = 0;
  int per = 1;
  std::vector<int64_t> index;
  std::vector<double> weight;
  std::vector<bool> outside;
};

// The cubic convolution weights of the taps at floor(x) - 1 .. floor(x) + 2, r = x - floor(x).
void CubicWeights(double r, double a, double* w) {
  auto near = [a](double t) { return ((a + 2) * t - (a + 3)) * t * t + 1; };       // |t| <= 1
  auto far = [a](double t) { return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a; };  // 1 < |t| < 2
  w[0] = far(r + 1);
  w[1] = near(r);
  w[2] = near(1 - r);
  w[3] = far(2 - r);
}

// `scale` is out/in for sizes, else as given; `resized` the resized length the coordinate
// mappings use (in * scale, as ONNX's reference computes it, not the floored output length).
AxisTaps MakeTaps(const ResizeConfig& c, int64_t in, int64_t out, double scale, double resized,
                  double roi_start, double roi_end) {
  AxisTaps t;
  t.in = in;
  t.out = out;
  t.per = c.mode == "nearest" ? 1 : c.mode == "linear" ? 2 : 4;
  t.index.resize(out * t.per);
  t.weight.resize(out * t.per);
  t.outside.assign(out, false);
  for (int64_t o = 0; o < out; ++o) {
    double x;
    if (c.transform == "asymmetric") {
      x = o / scale;
    } else if (c.transform == "align_corners") {
      x = resized == 1 ? 0 : o * (in - 1) / (resized - 1);
    } else if (c.transform == "pytorch_half_pixel") {
      x = resized > 1 ? (o + 0.5) / scale - 0.5 : 0;
    } else if (c.transform == "tf_crop_and_resize") {
      x = resized > 1 ? roi_start * (in - 1) + o * (roi_end - roi_start) * (in - 1) / (resized - 1)
                      : 0.5 * (roi_start + roi_end) * (in - 1);
      if (x < 0 || x > in - 1) {
        t.outside[o] = true;
        continue;
      }
    } else if (c.transform == "tf_half_pixel_for_nn") {
      x = (o + 0.5) / scale;
    } else {  // half_pixel
      x = (o + 0.5) / scale - 0.5;
    }
    const double base = std::floor(x), r = x - base;
    const auto b = static_cast<int64_t>(base);
    int64_t* idx = &t.index[o * t.per];
    double* w = &t.weight[o * t.per];
    if (t.per == 1) {
      bool up = false;
      if (r != 0) {
        if (c.nearest == "round_prefer_floor") up = r > 0.5;
        if (c.nearest == "round_prefer_ceil") up = r >= 0.5;
        if (c.nearest == "ceil") up = true;
      }
      idx[0] = b + (up ? 1 : 0);
      w[0] = 1;
    } else if (t.per == 2) {
      idx[0] = b;
      idx[1] = b + 1;
      w[0] = 1 - r;
      w[1] = r;
    } else {
      for (int k = 0; k < 4; ++k) idx[k] = b - 1 + k;
      CubicWeights(r, c.cubic_a, w);
    }
    if (c.exclude_outside && t.per > 1) {
      double sum = 0;
      for (int k = 0; k < t.per; ++k) {
        if (idx[k] < 0 || idx[k] >= in) w[k] = 0;
        sum += w[k];
      }
      if (sum != 0) {
        for (int k = 0; k < t.per; ++k) w[k] /= sum;
      }
    }
    // Beyond the edges the edge element repeats.
    for (int k = 0; k < t.per; ++k) idx[k] = std::clamp<int64_t>(idx[k], 0, in - 1);
  }
  return t;
}

// The taps of every axis of an input of `in_dims`, from the kernel's roi, scales and sizes
// inputs (1, 2, 3 of Resize; 2, 3, 4 of ResizeGrad). Errors name what does not fit.
Result<std::vector<AxisTaps>> TapsFor(const ResizeConfig& c, const std::vector<int64_t>& in_dims,
                                      const Tensor& roi, const Tensor& scales,
                                      const Tensor& sizes) {
  const auto rank = static_cast<int64_t>(in_dims.size());
  const bool by_sizes = sizes.num_elements() > 0;
  if (by_sizes && sizes.num_elements() != rank) {
    return InvalidArgument("{} sizes for an input of rank {}", sizes.num_elements(), rank);
  }
  if (!by_sizes && scales.num_elements() != rank) {
    return InvalidArgument("{} scales (and no sizes) for an input of rank {}",
                           scales.num_elements(), rank);
  }
  const bool crop = c.transform == "tf_crop_and_resize";
  if (crop && roi.num_elements() != 2 * rank) {
    return InvalidArgument("tf_crop_and_resize needs a roi of {} values, got {}", 2 * rank,
                           roi.num_elements());
  }
  std::vector<AxisTaps> taps;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t in = in_dims[d];
    int64_t out;
    double scale;
    if (by_sizes) {
      out = sizes.data<int64_t>()[d];
      if (out < 0) return InvalidArgument("size {} for axis {}", out, d);
      scale = in > 0 ? static_cast<double>(out) / in : 1;
    } else {
      scale = scales.data<float>()[d];
      if (!(scale > 0) || !std::isfinite(scale)) {
        return InvalidArgument("scale {} for axis {} (positive, finite)", scale, d);
      }
      const double want = std::floor(in * scale);
      if (want > double{int64_t{1} << 31}) {
        return InvalidArgument("scale {} makes axis {} of {} elements", scale, d, want);
      }
      out = static_cast<int64_t>(want);
    }
    if (in == 0 && out > 0) return InvalidArgument("resizing an empty axis {} to {}", d, out);
    const double roi_start = crop ? roi.data<float>()[d] : 0;
    const double roi_end = crop ? roi.data<float>()[d + rank] : 1;
    taps.push_back(MakeTaps(c, in, out, scale, in * scale, roi_start, roi_end));
  }
  return taps;
}

// Along axis d of `src` (dims), forward: dst[.., o, ..] = sum of w * src[.., idx, ..];
// backward: dst[.., idx, ..] += w * src[.., o, ..]. Returns dst's dims.
template <typename T>
std::vector<int64_t> ApplyAxis(const AxisTaps& t, size_t d, const std::vector<int64_t>& dims,
                               const std::vector<double>& src, std::vector<double>& dst,
                               bool backward, double extrapolation) {
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= dims[i];
  for (size_t i = d + 1; i < dims.size(); ++i) inner *= dims[i];
  std::vector<int64_t> next = dims;
  next[d] = backward ? t.in : t.out;
  const int64_t src_len = dims[d], dst_len = next[d];
  dst.assign(static_cast<size_t>(outer * dst_len * inner), 0.0);
  for (int64_t b = 0; b < outer; ++b) {
    const double* s = src.data() + b * src_len * inner;
    double* y = dst.data() + b * dst_len * inner;
    for (int64_t o = 0; o < t.out; ++o) {
      if (t.outside[o]) {
        if (!backward) std::fill(y + o * inner, y + (o + 1) * inner, extrapolation);
        continue;
      }
      for (int k = 0; k < t.per; ++k) {
        const int64_t i = t.index[o * t.per + k];
        const double w = t.weight[o * t.per + k];
        if (w == 0) continue;
        const double* from = backward ? s + o * inner : s + i * inner;
        double* to = backward ? y + i * inner : y + o * inner;
        for (int64_t j = 0; j < inner; ++j) to[j] += w * from[j];
      }
    }
  }
  return next;
}

// The most elements an intermediate of the axis-by-axis resampling may hold (doubles).
constexpr int64_t kMaxResizeElements = int64_t{1} << 28;

// Resize (backward: its gradient) of `x` whose dims are `in_dims` (the forward input's).
Status Run(KernelContext& ctx, const ResizeConfig& c, const Tensor& x,
           const std::vector<int64_t>& in_dims, int first_operand, bool backward,
           const std::vector<int64_t>& known) {
  ASSIGN_OR_RETURN(auto taps, TapsFor(c, in_dims, ctx.input(first_operand),
                                      ctx.input(first_operand + 1), ctx.input(first_operand + 2)));
  std::vector<int64_t> out_dims;
  for (const auto& t : taps) out_dims.push_back(t.out);
  // Every intermediate (axes 0..d resized, the rest not) within bounds before anything is made.
  for (size_t d = 0; d <= taps.size(); ++d) {
    double elements = 1;
    for (size_t i = 0; i < taps.size(); ++i) elements *= i < d ? out_dims[i] : in_dims[i];
    if (elements > static_cast<double>(kMaxResizeElements)) {
      return InvalidArgument("resizing {} to {} takes {:.0f} elements on the way (at most {})",
                             Shape(in_dims), Shape(out_dims), elements, kMaxResizeElements);
    }
  }
  if (backward && x.shape().dim_vector() != out_dims) {
    return InvalidArgument("the gradient is {}, the resized output {}", x.shape(), Shape(out_dims));
  }
  if (!known.empty()) {
    bool agrees = known.size() == out_dims.size();
    for (size_t i = 0; agrees && i < known.size(); ++i) {
      agrees = known[i] < 0 || known[i] == out_dims[i];
    }
    if (!agrees) {
      return InvalidArgument("resizing gives {}, where the graph was built for {}", Shape(out_dims),
                             Shape(known));
    }
  }
  return DispatchFloat(x.dtype(), [&]<typename T>() -> Status {
    std::vector<double> cur(x.data<T>(), x.data<T>() + x.num_elements()), next;
    std::vector<int64_t> dims = x.shape().dim_vector();
    for (size_t k = 0; k < taps.size(); ++k) {
      const size_t d = backward ? taps.size() - 1 - k : k;
      dims = ApplyAxis<T>(taps[d], d, dims, cur, next, backward, c.extrapolation);
      std::swap(cur, next);
    }
    ASSIGN_OR_RETURN(Tensor * y, ctx.AllocateOutput(0, x.dtype(), Shape(dims)));
    for (size_t i = 0; i < cur.size(); ++i) y->data<T>()[i] = static_cast<T>(cur[i]);
    return Status::OK();
  });
}

class ResizeKernel : public OpKernel {
 public:
  explicit ResizeKernel(const KernelInit& init)
      : c_(ConfigOf(init)), known_(*init.node.GetAttr<std::vector<int64_t>>("known")) {}
  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    return Run(ctx, c_, x, x.shape().dim_vector(), 1, false, known_);
  }

 private:
  ResizeConfig c_;
  std::vector<int64_t> known_;
};

class ResizeGradKernel : public OpKernel {
 public:
  explicit ResizeGradKernel(const KernelInit& init) : c_(ConfigOf(init)) {}
  Status Compute(KernelContext& ctx) override {
    return Run(ctx, c_, ctx.input(0), ctx.input(1).shape().dim_vector(), 2, true, {});
  }

 private:
  ResizeConfig c_;
};

}  // namespace

Status RegisterImageKernels() {
  RETURN_IF_ERROR(RegisterKernel<ResizeKernel>("Resize", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ResizeGradKernel>("ResizeGrad", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
