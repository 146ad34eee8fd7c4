// CPU kernels of BatchNorm (training), BatchNormInference and BatchNormGrad over axis 1 of an
// [N, C, ...] tensor. f32 runs on oneDNN's batch normalization primitives (from the shared
// PrimitiveCache); f64 runs on loops, which the double-precision gradient checks use.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>

#include "ops/batch_norm_dims.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/dnnl_context.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/primitive_cache.h"

namespace dflow::cpu {
namespace {

using dnnl::memory;

enum class Mode { kTraining, kInference, kBackward };

using Dims = BatchNormDims;

// Calls f(channel) for every channel, in parallel.
template <typename F>
void ForEachChannel(const Dims& d, F&& f) {
  int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, d.count()));
  ParallelFor(d.c, grain, [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) f(ch);
  });
}

// --- Loops (f64) ---

template <typename T>
void MomentsLoop(const Dims& d, const T* x, T* mean, T* var) {
  ForEachChannel(d, [&](int64_t ch) {
    double sum = 0;
    for (int64_t b = 0; b < d.n; ++b)
      for (int64_t i = 0; i < d.inner; ++i) sum += x[d.index(b, ch, i)];
    double m = sum / static_cast<double>(d.count()), sq = 0;
    for (int64_t b = 0; b < d.n; ++b) {
      for (int64_t i = 0; i < d.inner; ++i) {
        double v = x[d.index(b, ch, i)] - m;
        sq += v * v;
      }
    }
    mean[ch] = static_cast<T>(m);
    var[ch] = static_cast<T>(sq / static_cast<double>(d.count()));
  });
}

template <typename T>
void NormalizeLoop(const Dims& d, const T* x, const T* scale, const T* offset, const T* mean,
                   const T* var, double eps, T* y) {
  ForEachChannel(d, [&](int64_t ch) {
    T k = static_cast<T>(scale[ch] / std::sqrt(var[ch] + eps));
    for (int64_t b = 0; b < d.n; ++b) {
      for (int64_t i = 0; i < d.inner; ++i) {
        int64_t j = d.index(b, ch, i);
        y[j] = (x[j] - mean[ch]) * k + offset[ch];
      }
    }
  });
}

// doffset = sum dy; dscale = sum dy * xhat; dx = scale * inv / M * (M dy - doffset - xhat dscale).
template <typename T>
void BackwardLoop(const Dims& d, const T* dy, const T* x, const T* scale, const T* mean,
                  const T* var, double eps, T* dx, T* dscale, T* doffset) {
  ForEachChannel(d, [&](int64_t ch) {
    double inv = 1 / std::sqrt(var[ch] + eps), sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t b = 0; b < d.n; ++b) {
      for (int64_t i = 0; i < d.inner; ++i) {
        int64_t j = d.index(b, ch, i);
        sum_dy += dy[j];
        sum_dy_xhat += dy[j] * (x[j] - mean[ch]) * inv;
      }
    }
    double m = static_cast<double>(d.count()), k = scale[ch] * inv / m;
    for (int64_t b = 0; b < d.n; ++b) {
      for (int64_t i = 0; i < d.inner; ++i) {
        int64_t j = d.index(b, ch, i);
        double xhat = (x[j] - mean[ch]) * inv;
        dx[j] = static_cast<T>(k * (m * dy[j] - sum_dy - xhat * sum_dy_xhat));
      }
    }
    dscale[ch] = static_cast<T>(sum_dy_xhat);
    doffset[ch] = static_cast<T>(sum_dy);
  });
}

// --- oneDNN (f32) ---

struct BnPrim {
  dnnl::primitive prim;
  memory::desc data, stats, scratch;
};

std::shared_ptr<const BnPrim> Primitive(Mode mode, const Shape& x, double eps) {
  std::string key =
      fmt::format("bnorm:{}:{}:{}", static_cast<int>(mode), fmt::join(x.dim_vector(), ","), eps);
  return PrimitiveCache::Global().GetOrCreate<BnPrim>(key, [&] {
    memory::dims dims = x.dim_vector(), strides(dims.size(), 1);
    for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) {
      strides[i] = strides[i + 1] * dims[i + 1];
    }
    memory::desc data(dims, memory::data_type::f32, strides);
    auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    if (mode == Mode::kInference) flags |= dnnl::normalization_flags::use_global_stats;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto prop = mode == Mode::kInference ? dnnl::prop_kind::forward_inference
                                         : dnnl::prop_kind::forward_training;
    dnnl::batch_normalization_forward::primitive_desc fwd(
        dnnl::batch_normalization_forward::desc(prop, data, static_cast<float>(eps), flags), attr,
        CpuEngine());
    memory::desc stats({x[1]}, memory::data_type::f32, memory::format_tag::a);
    if (mode != Mode::kBackward) {
      return std::make_shared<const BnPrim>(
          BnPrim{dnnl::batch_normalization_forward(fwd), data, stats, fwd.scratchpad_desc()});
    }
    dnnl::batch_normalization_backward::primitive_desc bwd(
        dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, data, data,
                                                 static_cast<float>(eps), flags),
        attr, CpuEngine(), fwd);
    return std::make_shared<const BnPrim>(
        BnPrim{dnnl::batch_normalization_backward(bwd), data, stats, bwd.scratchpad_desc()});
  });
}

// Runs `p` with the given (argument, pointer) pairs; vectors are [C], the rest are data tensors.
Status Execute(KernelContext& ctx, const BnPrim& p,
               std::initializer_list<std::pair<int, const void*>> data_args,
               std::initializer_list<std::pair<int, const void*>> vector_args) {
  const auto& e = CpuEngine();
  std::unordered_map<int, memory> args;
  for (auto [arg, ptr] : data_args) args.emplace(arg, memory(p.data, e, const_cast<void*>(ptr)));
  for (auto [arg, ptr] : vector_args) args.emplace(arg, memory(p.stats, e, const_cast<void*>(ptr)));
  TempBuffers temp(ctx.allocator());
  ASSIGN_OR_RETURN(void* scratch, temp.Get(p.scratch.get_size()));
  args.emplace(DNNL_ARG_SCRATCHPAD, memory(p.scratch, e, scratch));
  dnnl::stream& s = ThreadStream();
  p.prim.execute(s, args);
  s.wait();
  return Status::OK();
}

class BatchNormKernel : public OpKernel {
 public:
  explicit BatchNormKernel(const KernelInit& init)
      : eps_(std::get<double>(*init.node.FindAttr("epsilon"))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    ASSIGN_OR_RETURN(Dims d, BatchNormDimsOf(x.shape()));
    RETURN_IF_ERROR(CheckChannelVector(ctx.input(1), "scale", d.c, x.dtype()));
    RETURN_IF_ERROR(CheckChannelVector(ctx.input(2), "offset", d.c, x.dtype()));
    if (d.count() == 0) {
      return InvalidArgument("no elements per channel in {}: batch statistics need at least one",
                             x.shape());
    }
    DType t = x.dtype();
    ASSIGN_OR_RETURN(Tensor * y, ctx.AllocateOutput(0, t, x.shape()));
    ASSIGN_OR_RETURN(Tensor * mean, ctx.AllocateOutput(1, t, Shape{d.c}));
    ASSIGN_OR_RETURN(Tensor * var, ctx.AllocateOutput(2, t, Shape{d.c}));
    if (t == DType::kF32) {
      return Execute(ctx, *Primitive(Mode::kTraining, x.shape(), eps_),
                     {{DNNL_ARG_SRC, x.raw_data()}, {DNNL_ARG_DST, y->raw_data()}},
                     {{DNNL_ARG_SCALE, ctx.input(1).raw_data()},
                      {DNNL_ARG_SHIFT, ctx.input(2).raw_data()},
                      {DNNL_ARG_MEAN, mean->raw_data()},
                      {DNNL_ARG_VARIANCE, var->raw_data()}});
      return Status::OK();
    }
    return DispatchFloat(t, [&]<typename T>() -> Status {
      MomentsLoop(d, x.data<T>(), mean->data<T>(), var->data<T>());
      NormalizeLoop(d, x.data<T>(), ctx.input(1).data<T>(), ctx.input(2).data<T>(), mean->data<T>(),
                    var->data<T>(), eps_, y->data<T>());
      return Status::OK();
    });
  }

 private:
  double eps_;
};

class BatchNormInferenceKernel : public OpKernel {
 public:
  explicit BatchNormInferenceKernel(const KernelInit& init)
      : eps_(std::get<double>(*init.node.FindAttr("epsilon"))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    ASSIGN_OR_RETURN(Dims d, BatchNormDimsOf(x.shape()));
    const char* names[] = {"scale", "offset", "mean", "variance"};
    for (int i = 1; i <= 4; ++i)
      RETURN_IF_ERROR(CheckChannelVector(ctx.input(i), names[i - 1], d.c, x.dtype()));
    DType t = x.dtype();
    ASSIGN_OR_RETURN(Tensor * y, ctx.ForwardOrAllocateOutput(0, 0, t, x.shape()));
    if (x.num_elements() == 0) return Status::OK();
    if (t == DType::kF32) {
      return Execute(ctx, *Primitive(Mode::kInference, x.shape(), eps_),
                     {{DNNL_ARG_SRC, x.raw_data()}, {DNNL_ARG_DST, y->raw_data()}},
                     {{DNNL_ARG_SCALE, ctx.input(1).raw_data()},
                      {DNNL_ARG_SHIFT, ctx.input(2).raw_data()},
                      {DNNL_ARG_MEAN, ctx.input(3).raw_data()},
                      {DNNL_ARG_VARIANCE, ctx.input(4).raw_data()}});
      return Status::OK();
    }
    return DispatchFloat(t, [&]<typename T>() -> Status {
      NormalizeLoop(d, x.data<T>(), ctx.input(1).data<T>(), ctx.input(2).data<T>(),
                    ctx.input(3).data<T>(), ctx.input(4).data<T>(), eps_, y->data<T>());
      return Status::OK();
    });
  }

 private:
  double eps_;
};

class BatchNormGradKernel : public OpKernel {
 public:
  explicit BatchNormGradKernel(const KernelInit& init)
      : eps_(std::get<double>(*init.node.FindAttr("epsilon"))) {}

  Status Compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    ASSIGN_OR_RETURN(Dims d, BatchNormDimsOf(x.shape()));
    if (dy.shape() != x.shape()) {
      return InvalidArgument("output gradient {} does not match the input {}", dy.shape(),
                             x.shape());
    }
    const char* names[] = {"scale", "mean", "variance"};
    for (int i = 2; i <= 4; ++i)
      RETURN_IF_ERROR(CheckChannelVector(ctx.input(i), names[i - 2], d.c, x.dtype()));
    DType t = x.dtype();
    ASSIGN_OR_RETURN(Tensor * dx, ctx.AllocateOutput(0, t, x.shape()));
    ASSIGN_OR_RETURN(Tensor * dscale, ctx.AllocateOutput(1, t, Shape{d.c}));
    ASSIGN_OR_RETURN(Tensor * doffset, ctx.AllocateOutput(2, t, Shape{d.c}));
    if (d.count() == 0) {
      std::memset(dscale->raw_data(), 0, dscale->num_bytes());
      std::memset(doffset->raw_data(), 0, doffset->num_bytes());
      return Status::OK();
    }
    if (t == DType::kF32) {
      // oneDNN 2.6 asks for the shift too though the gradients do not depend on it.
      std::vector<float> unused_shift(d.c, 0.f);
      return Execute(ctx, *Primitive(Mode::kBackward, x.shape(), eps_),
                     {{DNNL_ARG_SRC, x.raw_data()},
                      {DNNL_ARG_DIFF_DST, dy.raw_data()},
                      {DNNL_ARG_DIFF_SRC, dx->raw_data()}},
                     {{DNNL_ARG_SCALE, ctx.input(2).raw_data()},
                      {DNNL_ARG_SHIFT, unused_shift.data()},
                      {DNNL_ARG_MEAN, ctx.input(3).raw_data()},
                      {DNNL_ARG_VARIANCE, ctx.input(4).raw_data()},
                      {DNNL_ARG_DIFF_SCALE, dscale->raw_data()},
                      {DNNL_ARG_DIFF_SHIFT, doffset->raw_data()}});
      return Status::OK();
    }
    return DispatchFloat(t, [&]<typename T>() -> Status {
      BackwardLoop(d, dy.data<T>(), x.data<T>(), ctx.input(2).data<T>(), ctx.input(3).data<T>(),
                   ctx.input(4).data<T>(), eps_, dx->data<T>(), dscale->data<T>(),
                   doffset->data<T>());
      return Status::OK();
    });
  }

 private:
  double eps_;
};

}  // namespace

Status RegisterBatchNormKernels() {
  RETURN_IF_ERROR(RegisterKernel<BatchNormKernel>("BatchNorm", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BatchNormInferenceKernel>("BatchNormInference", "CPU"));
  RETURN_IF_ERROR(RegisterKernel<BatchNormGradKernel>("BatchNormGrad", "CPU"));
  return Status::OK();
}

}  // namespace dflow::cpu
