// CPU kernels of Conv2D and its two gradients. f32 runs on oneDNN's convolution primitives
// (forward, backward data, backward weights) in the layouts oneDNN picks (usually blocked, much
// faster than plain NCHW), reordering from and to the graph's NCHW/OIHW tensors at the kernel's
// edges; primitives live in the shared PrimitiveCache, keyed by pass and geometry. f64 runs on a
// plain loop (oneDNN has no f64 convolution), which the double-precision gradient checks use.
#include "ops/common/conv_kernels.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dnnl_context.h"
#include "ops/cpu/half.h"
#include "ops/cpu/nan_aware.h"
#include "ops/cpu/packed_weights.h"
#include "ops/cpu/primitive_cache.h"

namespace dflow::cpu {
namespace {

using dnnl::memory;

using Pass = ConvPass;

// What a forward convolution applies after the product, as oneDNN post-ops, and the layouts
// of its activations.
struct ConvForm {
  bool bias = false;
  // oneDNN's ReLU and clip post-ops turn NaN into their lower bound: kernels ask for them only
  // on finite inputs (which give no NaN short of overflow), the others get the activation as a
  // pass that keeps NaN. kReluKeepingNaN is a ReLU that keeps NaN (ELU with alpha 0, then
  // x * 1 + 0 to make its -0 into 0), which needs no check but costs compute: 4-12% on most of
  // ResNet-50's convolutions at batch 1, 44% on a 64 -> 256 1x1 one.
  enum class Act { kNone, kRelu, kClip, kReluKeepingNaN } act = Act::kNone;
  float lo = 0, hi = 0;
  bool sum = false;  // the output buffer's prior contents (a residual) added before `act`
  int block = 0;     // 0: NCHW output; else nChw{block}c
  bool x_blocked = false;
  // Winograd's F(4x4, 3x3) (oneDNN's convolution_winograd) instead of the direct algorithm, for
  // a 3x3 stride-1 convolution of finite inputs (the transforms turn an infinity into NaN and
  // spread a NaN over a tile): 1.4-2.5x faster on ResNet-50's 3x3 convolutions, the output
  // within 4e-6 of its scale of the direct one's. The direct algorithm where oneDNN has none.
  bool winograd = false;

  bool operator==(const ConvForm&) const = default;

  std::string Key() const {
    return fmt::format("{}:{}:{}:{}:{}:{}:{}:{}", bias, static_cast<int>(act), lo, hi, sum, block,
                       x_blocked, winograd);
  }
};

dnnl::memory::format_tag BlockedTag(int block) {
  return block == 16 ? dnnl::memory::format_tag::nChw16c : dnnl::memory::format_tag::nChw8c;
}

// The oneDNN primitive of one pass for one geometry; the forward pass optionally adds a bias [O],
// a residual and an activation (ConvForm: post-ops of _FusedConv2D and _BlockedConv2D).
class DnnlConv {
 public:
  // `type`: of the activations and weights (f32, or bf16 without post-ops); the bias is f32.
  DnnlConv(const ConvGeometry& g, Pass pass, const ConvForm& form = {},
           memory::data_type type = memory::data_type::f32) {
    using tag = memory::format_tag;
    memory::dims src_dims = {g.n, g.c, g.h, g.w}, dst_dims = {g.n, g.o, g.oh, g.ow};
    memory::dims wts_dims = g.groups == 1 ? memory::dims{g.o, g.c, g.kh, g.kw}
                                          : memory::dims{g.groups, g.og(), g.cg(), g.kh, g.kw};
    tag wts_plain = g.groups == 1 ? tag::oihw : tag::goihw;
    plain_src_ = memory::desc(src_dims, type, form.x_blocked ? BlockedTag(form.block) : tag::nchw);
    plain_dst_ = memory::desc(dst_dims, type, form.block ? BlockedTag(form.block) : tag::nchw);
    plain_wts_ = memory::desc(wts_dims, type, wts_plain);
    // oneDNN picks the layouts. Keeping plain layouts for a 1-channel first layer (its im2col
    // path looks 7x faster under ONEDNN_VERBOSE) made the whole CNN step slower here: 35.3 ms
    // against 31.8 ms (medians of 3), so every convolution takes oneDNN's choice, but for
    // blocked activations, which stay in their layout from one convolution to the next.
    memory::desc src = form.x_blocked ? plain_src_ : memory::desc(src_dims, type, tag::any);
    memory::desc dst = form.block ? plain_dst_ : memory::desc(dst_dims, type, tag::any);
    memory::desc wts(wts_dims, type, tag::any);
    memory::dims strides = {g.sh, g.sw}, dil = {g.dh - 1, g.dw - 1}, pl = {g.pt, g.pl},
                 pr = {g.pb, g.pr};
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto alg = dnnl::algorithm::convolution_direct;
    dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wts, dst,
                                        strides, dil, pl, pr),
        attr, CpuEngine());
    sum_ = form.sum;
    const bool post = form.bias || form.act != ConvForm::Act::kNone || form.sum;
    if (pass == Pass::kForward && post) {
      dnnl::primitive_attr fused = attr;
      dnnl::post_ops ops;
      if (form.sum) ops.append_sum(1.f);
      if (form.act == ConvForm::Act::kRelu) {
        ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      } else if (form.act == ConvForm::Act::kReluKeepingNaN) {
        ops.append_eltwise(1.f, dnnl::algorithm::eltwise_elu, 0.f, 0.f);
        ops.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 1.f, 0.f);
      } else if (form.act == ConvForm::Act::kClip) {
        ops.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, form.lo, form.hi);
      }
      fused.set_post_ops(ops);
      memory::desc bias_desc({g.o}, memory::data_type::f32, tag::a);
      auto make = [&](dnnl::prop_kind prop, dnnl::algorithm a) {
        auto desc = form.bias ? dnnl::convolution_forward::desc(prop, a, src, wts, bias_desc, dst,
                                                                strides, dil, pl, pr)
                              : dnnl::convolution_forward::desc(prop, a, src, wts, dst, strides,
                                                                dil, pl, pr);
        return dnnl::convolution_forward::primitive_desc(desc, fused, CpuEngine());
      };
      fwd = make(dnnl::prop_kind::forward_training, alg);
      if (form.winograd) {
        try {
          fwd = make(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd);
        } catch (const dnnl::error&) {  // none for this shape or CPU: the direct one stays
        }
      }
      bias_ = bias_desc;
    }
    if (pass == Pass::kForward) {
      prim_ = dnnl::convolution_forward(fwd);
      SetDescs(fwd.src_desc(), fwd.weights_desc(), fwd.dst_desc(), fwd.scratchpad_desc());
    } else if (pass == Pass::kBackwardData) {
      dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(alg, src, wts, dst, strides, dil, pl, pr), attr,
          CpuEngine(), fwd);
      prim_ = dnnl::convolution_backward_data(pd);
      SetDescs(pd.diff_src_desc(), pd.weights_desc(), pd.diff_dst_desc(), pd.scratchpad_desc());
    } else {
      dnnl::convolution_backward_weights::primitive_desc pd(
          dnnl::convolution_backward_weights::desc(alg, src, wts, dst, strides, dil, pl, pr), attr,
          CpuEngine(), fwd);
      prim_ = dnnl::convolution_backward_weights(pd);
      SetDescs(pd.src_desc(), pd.diff_weights_desc(), pd.diff_dst_desc(), pd.scratchpad_desc());
    }
  }

  const memory::desc& weights_desc() const { return wts_; }
  const memory::desc& plain_weights_desc() const { return plain_wts_; }

  // Runs the pass on (x, w, y): for the forward pass x, w in and y out; backward data dy (in y),
  // w in, dx out (in x); backward filter x, dy (in y) in, dw out (in w).
  // Scratch space and staged copies come from `temp` (the device's memory).
  // `w_staged`: w is already in weights_desc()'s layout (a constant's weights, reordered once).
  // Runs of small convolutions (MobileNetV2's at batch 1 take 20-100 us) feel every microsecond
  // spent around the primitive, so what can be decided once is: whether each operand needs a
  // copy in the primitive's layout, and the arguments go to oneDNN's C interface as an array.
  Status Run(TempBuffers& temp, Pass pass, void* x, void* w, void* y, const void* bias = nullptr,
             bool w_staged = false) const {
    const auto& e = CpuEngine();
    dnnl::stream& s = ThreadStream();
    // Which of x, w, y the pass writes; the others it reads.
    bool x_out = pass == Pass::kBackwardData, w_out = pass == Pass::kBackwardFilter,
         y_out = pass == Pass::kForward;
    memory px(plain_src_, e, x), pw(w_staged ? wts_ : plain_wts_, e, w), py(plain_dst_, e, y);
    ASSIGN_OR_RETURN(memory xm, Stage(temp, px, stage_src_, src_, x_out, s));
    ASSIGN_OR_RETURN(memory wm, Stage(temp, pw, stage_wts_ && !w_staged, wts_, w_out, s));
    // A sum post-op adds what y holds: staged in the primitive's layout, y goes in too.
    ASSIGN_OR_RETURN(memory ym, Stage(temp, py, stage_dst_, dst_, y_out && !sum_, s));
    ASSIGN_OR_RETURN(void* scratch, temp.Get(scratch_bytes_));
    memory sm(scratch_, e, scratch);
    std::optional<memory> bm;
    std::array<dnnl_exec_arg_t, 5> args;
    int n = 0;
    auto arg = [&](int kind, const memory& m) { args[n++] = {kind, m.get()}; };
    arg(DNNL_ARG_SCRATCHPAD, sm);
    if (pass == Pass::kForward) {
      arg(DNNL_ARG_SRC, xm);
      arg(DNNL_ARG_WEIGHTS, wm);
      arg(DNNL_ARG_DST, ym);
      if (bias != nullptr) arg(DNNL_ARG_BIAS, bm.emplace(bias_, e, const_cast<void*>(bias)));
    } else if (pass == Pass::kBackwardData) {
      arg(DNNL_ARG_DIFF_SRC, xm);
      arg(DNNL_ARG_WEIGHTS, wm);
      arg(DNNL_ARG_DIFF_DST, ym);
    } else {
      arg(DNNL_ARG_SRC, xm);
      arg(DNNL_ARG_DIFF_WEIGHTS, wm);
      arg(DNNL_ARG_DIFF_DST, ym);
    }
    if (dnnl_status_t st = dnnl_primitive_execute(prim_.get(), s.get(), n, args.data());
        st != dnnl_success) {
      return Internal("oneDNN's convolution failed (status {})", static_cast<int>(st));
    }
    // Results computed in oneDNN's layout go back to the graph's plain one.
    if (x_out && stage_src_) dnnl::reorder(xm, px).execute(s, xm, px);
    if (w_out && stage_wts_) dnnl::reorder(wm, pw).execute(s, wm, pw);
    if (y_out && stage_dst_) dnnl::reorder(ym, py).execute(s, ym, py);
    s.wait();
    return Status::OK();
  }

 private:
  void SetDescs(memory::desc src, memory::desc wts, memory::desc dst, memory::desc scratch) {
    src_ = src;
    wts_ = wts;
    dst_ = dst;
    scratch_ = scratch;
    scratch_bytes_ = scratch.get_size();
    stage_src_ = src_ != plain_src_;
    stage_wts_ = wts_ != plain_wts_;
    stage_dst_ = dst_ != plain_dst_;
  }
  bool sum_ = false;

  // `plain` itself unless `stage`; then a buffer in the primitive's layout `want`, filled from
  // `plain` when it is an input.
  static Result<memory> Stage(TempBuffers& temp, const memory& plain, bool stage,
                              const memory::desc& want, bool is_output, dnnl::stream& s) {
    if (!stage) return plain;
    ASSIGN_OR_RETURN(void* data, temp.Get(want.get_size()));
    memory staged(want, CpuEngine(), data);
    if (!is_output) dnnl::reorder(plain, staged).execute(s, const_cast<memory&>(plain), staged);
    return staged;
  }

  memory::desc plain_src_, plain_dst_, plain_wts_;
  memory::desc src_, dst_, wts_, scratch_, bias_;
  size_t scratch_bytes_ = 0;
  bool stage_src_ = false, stage_wts_ = false, stage_dst_ = false;
  dnnl::primitive prim_;
};

// What made a convolution's primitive: a kernel's memo of its last primitives is keyed by it.
struct ConvKey {
  ConvGeometry g{};
  Pass pass = Pass::kForward;
  ConvForm form;
  bool operator==(const ConvKey&) const = default;
};
// Two: a forward run may fall back to a second form (no post-ops) when its inputs are not finite.
using ConvMemo = PrimitiveMemo<ConvKey, DnnlConv>;

std::string CacheKey(const ConvGeometry& g, Pass pass, const ConvForm& form,
                     memory::data_type type = memory::data_type::f32) {
  const int64_t* fields = reinterpret_cast<const int64_t*>(&g);
  static_assert(sizeof(ConvGeometry) % sizeof(int64_t) == 0);
  return fmt::format("conv:{}:{}:{}:{}", static_cast<int>(pass), static_cast<int>(type), form.Key(),
                     fmt::join(fields, fields + sizeof(ConvGeometry) / sizeof(int64_t), ","));
}

// Runs a pass without post-ops on the graph's operands: forward x, w -> y; backward data dy,
// w -> dx; backward filter x, dy -> dw (in0 and in1 as the kernel takes them).
Status RunPlainPass(const DnnlConv& conv, TempBuffers& temp, Pass pass, const void* in0,
                    const void* in1, void* out) {
  void* a = const_cast<void*>(in0);
  void* b = const_cast<void*>(in1);
  if (pass == Pass::kForward) return conv.Run(temp, pass, a, b, out);
  if (pass == Pass::kBackwardData) return conv.Run(temp, pass, out, b, a);
  return conv.Run(temp, pass, a, out, b);
}

// A pass in bf16 on oneDNN's primitive (f32 accumulation), or in f16, for which oneDNN 2.6 has no
// CPU primitive, on the operands widened exactly to f32 with the result rounded once.
Status RunHalfPass(KernelContext& ctx, const ConvGeometry& g, Pass pass, const Tensor& in0,
                   const Tensor& in1, Tensor& out) {
  TempBuffers temp(ctx.allocator());
  if (in0.dtype() == DType::kBF16) {
    std::shared_ptr<const DnnlConv> conv;
    try {
      conv = PrimitiveCache::Global().GetOrCreate<DnnlConv>(
          CacheKey(g, pass, {}, memory::data_type::bf16), [&] {
            return std::make_shared<const DnnlConv>(g, pass, ConvForm{}, memory::data_type::bf16);
          });
    } catch (const dnnl::error&) {
      return Unimplemented("no CPU bf16 convolution of this shape on this processor");
    }
    return RunPlainPass(*conv, temp, pass, in0.raw_data(), in1.raw_data(), out.raw_data());
  }
  std::shared_ptr<const DnnlConv> conv = PrimitiveCache::Global().GetOrCreate<DnnlConv>(
      CacheKey(g, pass, {}), [&] { return std::make_shared<const DnnlConv>(g, pass); });
  return WidenedF16(temp, in0, in1, out, [&](void* w0, void* w1, void* wo) {
    return RunPlainPass(*conv, temp, pass, w0, w1, wo);
  });
}

// Inputs of a blocked convolution up to this size are checked for NaN and infinities before a
// ReLU post-op (they are likely still in cache from their producer, so the check costs little);
// larger ones take the ReLU that keeps NaN instead: checking a 100 MB activation (ResNet-50's first
// stage at batch 32) took half as long as the 1x1 convolution reading it. This holds only for
// weights that are not a Const: with constant weights the inputs' bounds decide (OutputBound).
constexpr int64_t kCheckedInputBytes = int64_t{1} << 20;

// Bounds through a convolution (Tensor::known_bound). Every output sums `taps` products of an
// input and a weight (C/G * KH * KW), so with inputs of magnitude at most bx and weights whose
// rows' magnitudes sum to at most `norm`, no output exceeds bx * norm plus the bias and the
// residual added, and the rounding of the sum (at most 2 * taps units of the last place of
// bx * norm). Winograd's F(4x4, 3x3) works on transformed tiles that are up to ~1e4 times larger
// (the input transform's rows sum to 10 in magnitude, the output transform's to 19, so 100 and
// 361 in two dimensions, and implementations scale the filter transform by up to 24^2), so its
// intermediate values must stay clear of the float range by kWinogradGrowth, and its rounding
// errors grow with them by up to kWinogradError. The result: a bound of every output, or
// +infinity when the computation could overflow (or a bound is unknown), so the output could
// hold an infinity or a NaN.
constexpr double kWinogradGrowth = 1e7;
constexpr double kWinogradError = 1e4;

float OutputBound(float bx, float norm, float bias, float residual, int64_t taps, bool winograd) {
  constexpr double kUnit = 0x1p-24;  // float's unit roundoff
  constexpr double kRoom = std::numeric_limits<float>::max() / 4;
  const double product = static_cast<double>(bx) * norm;  // NaN or inf when one is unknown
  const double growth = winograd ? kWinogradGrowth : 1;
  if (!(product * growth < kRoom) || !(bias < kRoom) || !(residual < kRoom)) {
    return std::numeric_limits<float>::infinity();
  }
  const double rounding =
      2 * static_cast<double>(taps + 64) * kUnit * (winograd ? kWinogradError : 1);
  const double bound = (product * (1 + rounding) + bias + residual) * (1 + 4 * kUnit);
  if (!(bound < kRoom)) return std::numeric_limits<float>::infinity();
  return std::nextafter(static_cast<float>(bound), std::numeric_limits<float>::infinity());
}

// A forward convolution's inputs: x, w, and the bias and the residual when its form has them.
struct ConvInputs {
  const Tensor* x;
  const Tensor* w;
  const Tensor* bias;
  const Tensor* residual;
};

// The forward convolution of x and w [+ the bias] [+ the residual (already in out)] into
// `out` with `form`'s post-ops; the activation runs as a pass that keeps NaN when an input is not
// finite. Bounds `out` (Tensor::known_bound) when its weights are a Const and its inputs are
// bounded, or were measured for the post-ops.
Status RunForward(KernelContext& ctx, const ConvGeometry& g, ConvForm form, PackedWeights& weights,
                  ConvMemo& memo, const ConvInputs& in, Tensor& out) {
  constexpr float kUnknown = std::numeric_limits<float>::infinity();
  void* y = out.raw_data();
  const Tensor& x = *in.x;
  const Tensor& w = *in.w;
  const void* bias = form.bias ? in.bias->raw_data() : nullptr;
  // Input i of the convolution: 0 x, 1 w, 2 the bias, 3 the residual.
  auto input = [&in](int i) -> const Tensor& {
    return i == 0 ? *in.x : i == 1 ? *in.w : i == 2 ? *in.bias : *in.residual;
  };
  // Winograd and the ReLU and clip post-ops need finite inputs (the transforms turn an infinity
  // into NaN and spread a NaN over a tile; the post-ops turn NaN into their lower bound).
  form.winograd = form.block > 0 && g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 &&
                  g.dw == 1 && g.groups == 1;
  const bool wants_finite =
      form.act == ConvForm::Act::kRelu || form.act == ConvForm::Act::kClip || form.winograd;
  const int64_t taps = g.cg() * g.kh * g.kw;
  // Constant weights: the output's bound from the inputs' (read before the run, which may write
  // the residual's buffer). Where the post-ops need finite inputs and the bound is unknown or too
  // large to rule out an overflow, the inputs are measured: one pass that bounds this output
  // and, through it, the convolutions after it, until their bounds grow too large in turn.
  const float norm = weights.MaxRowAbsSum(w, g.o);
  const bool bounded = norm <= std::numeric_limits<float>::max();
  float bx = bounded ? x.known_bound() : kUnknown;
  float bb = bounded && form.bias ? MaxAbs(input(2).data<float>(), g.o) : 0;
  float br = bounded && form.sum ? input(3).known_bound() : 0;
  float bound = OutputBound(bx, norm, bb, br, taps, form.winograd);
  // A blocked input is another blocked kernel's output (never a variable's, which is updated in
  // place), so what is measured of it holds for its other readers too: the residual of a
  // ResNet block is the input its first convolution measured.
  if (bounded && wants_finite && !(bound < kUnknown)) {
    bx = MaxAbsParallel(x.data<float>(), x.num_elements());
    if (form.x_blocked) x.NoteMeasuredBound(bx);
    bound = OutputBound(bx, norm, bb, br, taps, form.winograd);
    if (form.sum && !(bound < kUnknown)) {
      br = MaxAbsParallel(input(3).data<float>(), input(3).num_elements());
      input(3).NoteMeasuredBound(br);
      bound = OutputBound(bx, norm, bb, br, taps, form.winograd);
    }
  }
  if (form.winograd && bounded && !(bound < kUnknown)) {
    // Too large (or not finite) for Winograd: the direct algorithm may still be safe.
    form.winograd = false;
    bound = OutputBound(bx, norm, bb, br, taps, false);
  }
  const int64_t read_bytes = x.num_bytes() + (form.sum ? input(3).num_bytes() : 0);
  // Inputs their producer vouched for (a clipped convolution's output) need no check: the
  // activation is the exact post-op whatever their size.
  const bool inputs_known_finite =
      bound < kUnknown || (x.known_finite() && (!form.sum || input(3).known_finite()));
  if (form.act == ConvForm::Act::kRelu && form.block > 0 && !form.winograd &&
      !inputs_known_finite && read_bytes > kCheckedInputBytes) {
    form.act = ConvForm::Act::kReluKeepingNaN;
  }
  // A clip (ReLU6) has no post-op that keeps NaN. Where the inputs outweigh the output (a
  // strided depthwise convolution reads 4x what it writes) the clip runs as a pass over the
  // output, still in cache, instead of a check of the inputs: MobileNetV2's 112 -> 56 depthwise
  // convolution spent as long checking its 4.8 MB input as convolving it.
  const bool clip_after = form.act == ConvForm::Act::kClip && !form.winograd &&
                          !inputs_known_finite &&
                          read_bytes >= static_cast<int64_t>(out.num_bytes());
  if (clip_after) form.act = ConvForm::Act::kNone;
  const ConvForm::Act act = form.act;
  auto primitive = [&] {
    return memo.Get({g, Pass::kForward, form}, [&] {
      return PrimitiveCache::Global().GetOrCreate<DnnlConv>(CacheKey(g, Pass::kForward, form), [&] {
        return std::make_shared<const DnnlConv>(g, Pass::kForward, form);
      });
    });
  };
  std::shared_ptr<const DnnlConv> conv = primitive();
  const bool post_op_needs_finite =
      act == ConvForm::Act::kRelu || act == ConvForm::Act::kClip || form.winograd;
  ASSIGN_OR_RETURN(PackedWeights::Packed staged,
                   weights.Get(conv->plain_weights_desc(), conv->weights_desc(), w,
                               post_op_needs_finite && !(bound < kUnknown)));
  bool finite = true;
  if (post_op_needs_finite && !(bound < kUnknown)) {
    auto all_finite = [&](int i) {
      return input(i).known_finite() ||
             AllFiniteParallel(input(i).data<float>(), input(i).num_elements());
    };
    // With constant weights the inputs were measured: an input is not finite, or the product
    // could overflow (finite inputs then still give an infinity or a NaN, which the post-ops
    // would turn into their lower bound).
    finite = !bounded && staged.finite && all_finite(0) && (!form.bias || all_finite(2)) &&
             (!form.sum || all_finite(3));
    if (!finite) {
      form.act = ConvForm::Act::kNone;
      form.winograd = false;
      conv = primitive();
      ASSIGN_OR_RETURN(staged,
                       weights.Get(conv->plain_weights_desc(), conv->weights_desc(), w, false));
    }
  }
  TempBuffers temp(ctx.allocator());
  const bool packed = staged.data.raw_data() != nullptr;
  RETURN_IF_ERROR(conv->Run(temp, Pass::kForward, x.raw_data(),
                            const_cast<void*>(packed ? staged.data.raw_data() : w.raw_data()), y,
                            bias, packed));
  const int64_t n = out.num_elements();
  if (clip_after) ClipKeepingNaN(static_cast<float*>(y), n, form.lo, form.hi);
  // A ReLU keeps the bound, a clip to finite limits makes one of them; finite inputs clipped
  // are finite even without a bound of the product.
  const float clip_bound = std::max(std::fabs(form.lo), std::fabs(form.hi));
  if (act == ConvForm::Act::kClip && finite && clip_bound <= std::numeric_limits<float>::max()) {
    bound = std::min(bound, clip_bound);
  }
  out.set_known_bound(finite ? bound : kUnknown);
  if (finite || act == ConvForm::Act::kNone) return Status::OK();
  if (act == ConvForm::Act::kRelu) {
    ReluKeepingNaN(static_cast<float*>(y), n);
  } else {
    ClipKeepingNaN(static_cast<float*>(y), n, form.lo, form.hi);
  }
  return Status::OK();
}

template <Pass kPass>
class ConvKernel : public common::ConvBase<ConvKernel<kPass>, kPass> {
  using Base = common::ConvBase<ConvKernel, kPass>;
  using Base::epilogue_;

 public:
  explicit ConvKernel(const KernelInit& init) : Base(init), weights_(init, 1) {}
  Status Run(KernelContext& ctx, const Tensor& in0, const Tensor& in1,
             const ConvPassShapes& shapes) {
    const ConvGeometry& g = shapes.g;
    const Shape& out_shape = shapes.out;
    DType dtype = in0.dtype();
    const bool half = dtype == DType::kBF16 || dtype == DType::kF16;
    if (dtype != DType::kF32 && dtype != DType::kF64 && !half) {
      return InvalidArgument("no CPU convolution for {} (f32, f64, bf16 or f16)", dtype);
    }
    if (half && (epilogue_.bias || epilogue_.relu)) {
      return InvalidArgument("no CPU convolution for {} with a bias or an activation (f32)", dtype);
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dtype, out_shape));
    if (out->num_elements() == 0) return Status::OK();
    if (dtype == DType::kF64) {
      std::memset(out->raw_data(), 0, out->num_bytes());
      const double* a = in0.data<double>();
      const double* b = in1.data<double>();
      double* o = out->data<double>();
      if (kPass == Pass::kForward) {
        g.ForEachTap([&](int64_t xi, int64_t wi, int64_t yi) { o[yi] += a[xi] * b[wi]; });
      } else if (kPass == Pass::kBackwardData) {  // a = dy, b = w
        g.ForEachTap([&](int64_t xi, int64_t wi, int64_t yi) { o[xi] += a[yi] * b[wi]; });
      } else {  // a = x, b = dy
        g.ForEachTap([&](int64_t xi, int64_t wi, int64_t yi) { o[wi] += b[yi] * a[xi]; });
      }
      return Status::OK();
    }
    if (g.oh == 0 || g.ow == 0) {
      std::memset(out->raw_data(), 0, out->num_bytes());
      return Status::OK();
    }
    if (half) return RunHalfPass(ctx, g, kPass, in0, in1, *out);
    if (kPass != Pass::kForward) {
      std::shared_ptr<const DnnlConv> conv = PrimitiveCache::Global().GetOrCreate<DnnlConv>(
          CacheKey(g, kPass, {}), [&] { return std::make_shared<const DnnlConv>(g, kPass); });
      TempBuffers temp(ctx.allocator());
      return RunPlainPass(*conv, temp, kPass, in0.raw_data(), in1.raw_data(), out->raw_data());
    }
    ConvForm form{.bias = epilogue_.bias,
                  .act = epilogue_.relu ? ConvForm::Act::kRelu : ConvForm::Act::kNone};
    return RunForward(ctx, g, form, weights_, memo_,
                      {&in0, &in1, epilogue_.bias ? &ctx.input(2) : nullptr, nullptr}, *out);
  }

 private:
  PackedWeights weights_;
  ConvMemo memo_;
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// _BlockedConv2D: a forward convolution whose output (and input, when x_blocked) is in the
// blocked channel layout [N, C/b, H, W, b], with its bias, an optional residual (input 3, of the
// output's shape) and activation as post-ops.
class BlockedConvKernel : public OpKernel {
 public:
  explicit BlockedConvKernel(const KernelInit& init)
      : attrs_(ReadConvAttrs(init.node)), weights_(init, 1) {
    const Node& n = init.node;
    form_.bias = true;
    form_.block = static_cast<int>(std::get<int64_t>(*n.FindAttr("block")));
    form_.x_blocked = std::get<bool>(*n.FindAttr("x_blocked"));
    const std::string& act = std::get<std::string>(*n.FindAttr("activation"));
    form_.act = act == "Relu"   ? ConvForm::Act::kRelu
                : act == "Clip" ? ConvForm::Act::kClip
                                : ConvForm::Act::kNone;
    form_.lo = static_cast<float>(std::get<double>(*n.FindAttr("clip_min")));
    form_.hi = static_cast<float>(std::get<double>(*n.FindAttr("clip_max")));
    form_.sum = n.inputs().size() == 4;
  }

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& w = ctx.input(1).shape();
    const int64_t b = form_.block;
    Shape x4 = x.shape();
    if (form_.x_blocked) {
      const int64_t c = w.rank() == 4 ? w[1] * attrs_.groups : -1;
      if (x.shape().rank() != 5 || x.shape()[4] != b || x.shape()[1] != CeilDiv(c, b)) {
        return InvalidArgument("input {} is not the blocked layout of {} channels", x.shape(), c);
      }
      x4 = Shape{x.shape()[0], c, x.shape()[2], x.shape()[3]};
    }
    ASSIGN_OR_RETURN(ConvGeometry g, ConvGeometryOf(attrs_, x4, w));
    const Shape y{g.n, CeilDiv(g.o, b), g.oh, g.ow, b};
    Tensor* out;
    if (form_.sum) {
      const Tensor& residual = ctx.input(3);
      if (residual.shape() != y) {
        return InvalidArgument("residual {} is not the output's shape {}", residual.shape(), y);
      }
      ASSIGN_OR_RETURN(out, ctx.ForwardOrAllocateOutput(3, 0, DType::kF32, y));
      if (out->raw_data() != residual.raw_data()) {
        std::memcpy(out->raw_data(), residual.raw_data(), residual.num_bytes());
      }
    } else {
      ASSIGN_OR_RETURN(out, ctx.AllocateOutput(0, DType::kF32, y));
    }
    if (out->num_elements() == 0) return Status::OK();
    return RunForward(ctx, g, form_, weights_, memo_,
                      {&x, &ctx.input(1), &ctx.input(2), form_.sum ? &ctx.input(3) : nullptr},
                      *out);
  }

 private:
  const ConvAttrs attrs_;
  ConvForm form_;
  PackedWeights weights_;
  ConvMemo memo_;
};

// The activation of a _BlockedConvDw stage from its attributes.
ConvForm::Act ActOf(const std::string& act) {
  return act == "Relu"   ? ConvForm::Act::kRelu
         : act == "Clip" ? ConvForm::Act::kClip
                         : ConvForm::Act::kNone;
}

// `bound` after an activation: a ReLU keeps it, a clip to finite limits caps it. Unknown (a
// value that may hold NaN) stays unknown: the activations keep NaN.
float BoundAfter(ConvForm::Act act, float lo, float hi, float bound) {
  if (!(bound <= std::numeric_limits<float>::max())) return std::numeric_limits<float>::infinity();
  const float clip = std::max(std::fabs(lo), std::fabs(hi));
  if (act == ConvForm::Act::kClip && clip <= std::numeric_limits<float>::max()) {
    return std::min(bound, clip);
  }
  return bound;
}

// `t` (stored as `plain`) in layout `want`: the packed constant, t itself, or a reorder of it
// into a buffer from `temp`.
Result<dnnl::memory> WeightsIn(TempBuffers& temp, const PackedWeights::Packed& packed,
                               const memory::desc& plain, const memory::desc& want,
                               const Tensor& t) {
  if (packed.data.raw_data() != nullptr) {
    return memory(want, CpuEngine(), const_cast<void*>(packed.data.raw_data()));
  }
  memory from(plain, CpuEngine(), const_cast<void*>(t.raw_data()));
  if (plain == want) return from;
  ASSIGN_OR_RETURN(void* data, temp.Get(want.get_size()));
  memory to(want, CpuEngine(), data);
  dnnl::stream& s = ThreadStream();
  dnnl::reorder(from, to).execute(s, from, to);
  return to;
}

// _BlockedConvDw (ops/defs/fused_defs.cc): an expanding 1x1 convolution of a blocked x and the
// depthwise 3x3 one after it as one oneDNN primitive (the depthwise as its post-op, so the
// expanded activation stays in cache), both activations as post-ops. That needs finite values
// for the activations, so it runs where the bounds (constant weights, a bounded or measured
// input) rule out NaN and overflow; elsewhere the two convolutions run one after the other as
// _BlockedConv2D would run them, the activations keeping NaN.
// Expanded activations up to this size are written and read back between the two convolutions
// (they stay in cache) unless oneDNN fuses the pair natively.
constexpr int64_t kComposedFusionBytes = int64_t{4} << 20;

class BlockedConvDwKernel : public OpKernel {
 public:
  explicit BlockedConvDwKernel(const KernelInit& init)
      : block_(std::get<int64_t>(*init.node.FindAttr("block"))),
        stride_(std::get<int64_t>(*init.node.FindAttr("dw_stride"))),
        weights_(init, 1),
        dw_weights_(init, 3) {
    const Node& n = init.node;
    first_.bias = second_.bias = true;
    first_.block = second_.block = static_cast<int>(block_);
    first_.x_blocked = second_.x_blocked = true;
    first_.act = ActOf(std::get<std::string>(*n.FindAttr("activation")));
    first_.lo = static_cast<float>(std::get<double>(*n.FindAttr("clip_min")));
    first_.hi = static_cast<float>(std::get<double>(*n.FindAttr("clip_max")));
    second_.act = ActOf(std::get<std::string>(*n.FindAttr("dw_activation")));
    second_.lo = static_cast<float>(std::get<double>(*n.FindAttr("dw_clip_min")));
    second_.hi = static_cast<float>(std::get<double>(*n.FindAttr("dw_clip_max")));
  }

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    const Tensor& dw = ctx.input(3);
    const Shape& ws = w.shape();
    const int64_t b = block_;
    if (x.shape().rank() != 5 || x.shape()[4] != b || ws.rank() != 4 ||
        x.shape()[1] != CeilDiv(ws[1], b) || dw.shape() != Shape{ws[0], 1, 3, 3}) {
      return InvalidArgument("input {}, filters {} and {} are not a blocked 1x1 and 3x3 pair",
                             x.shape(), ws, dw.shape());
    }
    const Shape x4{x.shape()[0], ws[1], x.shape()[2], x.shape()[3]};
    ASSIGN_OR_RETURN(ConvGeometry g1,
                     ConvGeometryOf({{1, 1}, {0, 0, 0, 0}, {1, 1}, 1}, x4, w.shape()));
    const Shape mid{g1.n, g1.o, g1.oh, g1.ow};
    ASSIGN_OR_RETURN(
        ConvGeometry g2,
        ConvGeometryOf({{stride_, stride_}, {1, 1, 1, 1}, {1, 1}, g1.o}, mid, dw.shape()));
    ASSIGN_OR_RETURN(
        Tensor * out,
        ctx.AllocateOutput(0, DType::kF32, Shape{g2.n, CeilDiv(g2.o, b), g2.oh, g2.ow, b}));
    if (out->num_elements() == 0) return Status::OK();
    // The bound after both stages, from the inputs' (x measured when it has none).
    constexpr float kUnknown = std::numeric_limits<float>::infinity();
    const float norm1 = weights_.MaxRowAbsSum(w, g1.o), norm2 = dw_weights_.MaxRowAbsSum(dw, g1.o);
    float bound = kUnknown;
    if (norm1 <= std::numeric_limits<float>::max() && norm2 <= std::numeric_limits<float>::max()) {
      float bx = x.known_bound();
      if (!x.known_finite()) {
        bx = MaxAbsParallel(x.data<float>(), x.num_elements());
        x.NoteMeasuredBound(bx);
      }
      const float mid_bound = BoundAfter(
          first_.act, first_.lo, first_.hi,
          OutputBound(bx, norm1, MaxAbs(ctx.input(2).data<float>(), g1.o), 0, g1.c, false));
      bound = BoundAfter(
          second_.act, second_.lo, second_.hi,
          OutputBound(mid_bound, norm2, MaxAbs(ctx.input(4).data<float>(), g1.o), 0, 9, false));
    }
    std::shared_ptr<const Fused> p;
    if (bound < kUnknown) p = Primitive(g1);
    // oneDNN fuses the stride-2 pair in its 1x1 kernel; the stride-1 one it composes of the two
    // kernels over chunks of rows, which pays only where the expanded activation would not stay
    // in cache: MobileNetV2 at batch 32 took 81 ms a step with every pair fused against 98 ms
    // with none, at batch 1 2.47 against 2.40 ms (its largest expanded activation is 1.8 MB).
    const int64_t mid_bytes = g1.n * g1.o * g1.oh * g1.ow * int64_t{sizeof(float)};
    if (p != nullptr && p->prim && !p->native && mid_bytes <= kComposedFusionBytes) p = nullptr;
    if (p == nullptr || !p->prim) {
      // One after the other (an intermediate the size of the expanded activation).
      ASSIGN_OR_RETURN(Tensor between,
                       Tensor::Allocate(ctx.allocator(), DType::kF32,
                                        Shape{g1.n, CeilDiv(g1.o, b), g1.oh, g1.ow, b}));
      RETURN_IF_ERROR(
          RunForward(ctx, g1, first_, weights_, memo_, {&x, &w, &ctx.input(2), nullptr}, between));
      return RunForward(ctx, g2, second_, dw_weights_, dw_memo_,
                        {&between, &dw, &ctx.input(4), nullptr}, *out);
    }
    ASSIGN_OR_RETURN(PackedWeights::Packed w1, weights_.Get(p->plain_w, p->w, w, false));
    ASSIGN_OR_RETURN(PackedWeights::Packed w2, dw_weights_.Get(p->plain_dw, p->dw, dw, false));
    TempBuffers temp(ctx.allocator());
    ASSIGN_OR_RETURN(memory wm, WeightsIn(temp, w1, p->plain_w, p->w, w));
    ASSIGN_OR_RETURN(memory dwm, WeightsIn(temp, w2, p->plain_dw, p->dw, dw));
    ASSIGN_OR_RETURN(void* scratch, temp.Get(p->scratch.get_size()));
    const auto& e = CpuEngine();
    const memory::desc bias({g1.o}, memory::data_type::f32, memory::format_tag::a);
    dnnl::stream& s = ThreadStream();
    p->prim->execute(
        s, {{DNNL_ARG_SRC, memory(p->x, e, x.raw_data())},
            {DNNL_ARG_WEIGHTS, wm},
            {DNNL_ARG_BIAS, memory(bias, e, ctx.input(2).raw_data())},
            {DNNL_ARG_DST, memory(p->y, e, out->raw_data())},
            {DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, dwm},
            {DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS, memory(bias, e, ctx.input(4).raw_data())},
            {DNNL_ARG_SCRATCHPAD, memory(p->scratch, e, scratch)}});
    s.wait();
    out->set_known_bound(bound);
    return Status::OK();
  }

 private:
  struct Fused {
    std::optional<dnnl::convolution_forward> prim;  // none: oneDNN has no such fusion here
    bool native = false;  // one kernel, not oneDNN's composition of the two over row chunks
    memory::desc x, w, plain_w, dw, plain_dw, y, scratch;
  };

  std::shared_ptr<const Fused> Primitive(const ConvGeometry& g) {
    return fused_.Get(g, [&] { return MakePrimitive(g); });
  }

  std::shared_ptr<const Fused> MakePrimitive(const ConvGeometry& g) const {
    using dt = memory::data_type;
    using tag = memory::format_tag;
    const std::string key =
        fmt::format("conv_dw:{}:{}:{}:{}:{}", CacheKey(g, Pass::kForward, first_), stride_,
                    static_cast<int>(second_.act), second_.lo, second_.hi);
    return PrimitiveCache::Global().GetOrCreate<Fused>(key, [&] {
      auto f = std::make_shared<Fused>();
      const memory::desc x({g.n, g.c, g.h, g.w}, dt::f32, BlockedTag(first_.block));
      const memory::desc mid({g.n, g.o, g.oh, g.ow}, dt::f32, BlockedTag(first_.block));
      const memory::desc w({g.o, g.c, 1, 1}, dt::f32, tag::any), bias({g.o}, dt::f32, tag::a);
      dnnl::post_ops ops;
      auto act = [&ops](const ConvForm& form) {
        if (form.act == ConvForm::Act::kRelu) {
          ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
        } else if (form.act == ConvForm::Act::kClip) {
          ops.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, form.lo, form.hi);
        }
      };
      act(first_);
      if (stride_ == 1) {
        ops.append_dw_k3s1p1(dt::f32, dt::f32, dt::f32, 0, {});
      } else {
        ops.append_dw_k3s2p1(dt::f32, dt::f32, dt::f32, 0, {});
      }
      act(second_);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      attr.set_post_ops(ops);
      try {
        dnnl::convolution_forward::primitive_desc pd(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                            dnnl::algorithm::convolution_direct, x, w, bias, mid,
                                            {1, 1}, {0, 0}, {0, 0}),
            attr, CpuEngine());
        const memory::desc y({g.n, g.o, (g.oh - 1) / stride_ + 1, (g.ow - 1) / stride_ + 1},
                             dt::f32, BlockedTag(first_.block));
        // The fused output must be the blocked layout the graph holds.
        if (pd.dst_desc() != y || pd.src_desc() != x) return f;
        f->prim = dnnl::convolution_forward(pd);
        f->native = std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
        f->x = x;
        f->y = y;
        f->w = pd.weights_desc();
        f->plain_w = memory::desc({g.o, g.c, 1, 1}, dt::f32, tag::oihw);
        f->dw = pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS);
        f->plain_dw = memory::desc({g.o, 1, 1, 3, 3}, dt::f32, tag::goihw);
        f->scratch = pd.scratchpad_desc();
      } catch (const dnnl::error&) {  // no fusion for this shape or CPU: one after the other
      }
      return f;
    });
  }

  const int64_t block_, stride_;
  ConvForm first_, second_;
  PackedWeights weights_, dw_weights_;
  ConvMemo memo_, dw_memo_;
  PrimitiveMemo<ConvGeometry, Fused, 1> fused_;
};

// _BlockChannels (kToBlocked) and _UnblockChannels: oneDNN reorders between [N, C, H, W] and
// the blocked layout [N, C/b, H, W, b] (padding channels written as 0).
template <bool kToBlocked>
class ChannelBlockKernel : public OpKernel {
 public:
  explicit ChannelBlockKernel(const KernelInit& init)
      : block_(kToBlocked ? std::get<int64_t>(*init.node.FindAttr("block")) : 0),
        channels_(kToBlocked ? 0 : std::get<int64_t>(*init.node.FindAttr("channels"))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& s = x.shape();
    Shape plain = s, blocked = s;
    if (kToBlocked) {
      if (s.rank() != 4) return InvalidArgument("input {} is not [N, C, H, W]", s);
      blocked = Shape{s[0], CeilDiv(s[1], block_), s[2], s[3], block_};
    } else {
      if (s.rank() != 5 || s[4] <= 0 || s[1] != CeilDiv(channels_, s[4])) {
        return InvalidArgument("input {} is not the blocked layout of {} channels", s, channels_);
      }
      plain = Shape{s[0], channels_, s[2], s[3]};
    }
    ASSIGN_OR_RETURN(Tensor * out,
                     ctx.AllocateOutput(0, DType::kF32, kToBlocked ? blocked : plain));
    if (out->num_elements() == 0) return Status::OK();
    const int64_t b = blocked[4];
    if (b != 8 && b != 16) return InvalidArgument("block {} (8 or 16)", b);
    memory::dims dims = {plain[0], plain[1], plain[2], plain[3]};
    memory nchw({dims, memory::data_type::f32, memory::format_tag::nchw}, CpuEngine(),
                kToBlocked ? x.raw_data() : out->raw_data());
    memory blk({dims, memory::data_type::f32, BlockedTag(static_cast<int>(b))}, CpuEngine(),
               kToBlocked ? out->raw_data() : x.raw_data());
    dnnl::stream& st = ThreadStream();
    if (kToBlocked) {
      dnnl::reorder(nchw, blk).execute(st, nchw, blk);
    } else {
      dnnl::reorder(blk, nchw).execute(st, blk, nchw);
    }
    st.wait();
    out->set_known_bound(x.known_bound());  // the same values (and zeros padding the channels)
    return Status::OK();
  }

 private:
  const int64_t block_, channels_;
};

}  // namespace

Status RegisterConvKernels() {
  RETURN_IF_ERROR(RegisterKernel<BlockedConvKernel>("_BlockedConv2D", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BlockedConvDwKernel>("_BlockedConvDw", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ChannelBlockKernel<true>>("_BlockChannels", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<ChannelBlockKernel<false>>("_UnblockChannels", "CPU"));
  return common::RegisterConvKernels<ConvKernel>("CPU");
}

int ChannelBlock() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (isa >= dnnl::cpu_isa::avx512_core) return 16;
  return isa >= dnnl::cpu_isa::avx2 ? 8 : 0;
}

}  // namespace dflow::cpu
