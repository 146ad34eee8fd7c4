// GPU kernels of Conv2D, _FusedConv2D (bias and ReLU after the convolution) and Conv2D's two
// gradients on cuDNN, NCHW / OIHW, f32 and f64. The algorithm of each pass is measured once per
// geometry (cudnnFind*AlgorithmEx on the step's own tensors, in stream order) and kept by the
// kernel, with the workspace it needs; the search may use up to 1 GiB of workspace
// (DFLOW_CUDNN_SEARCH_MIB), less when the device's memory limit leaves less. f32 computes in f32
// unless DFLOW_ALLOW_TF32=1 allows TF32 tensor cores (PyTorch's default for convolutions). cuDNN
// pads symmetrically; other pads run on a zero-padded copy of the input (or crop a padded input
// gradient). DFLOW_CUDNN_LOG=1 prints every search's measurements to stderr.
#include "ops/common/conv_kernels.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cudnn_util.h"
#include "ops/cuda/kernel_util.h"

namespace dflow::cuda {
namespace {

using Pass = ConvPass;

// The most workspace an algorithm search offers cuDNN: 1 GiB, or DFLOW_CUDNN_SEARCH_MIB. On the
// H200, ResNet-50's FFT algorithms at batch 128 asked 272 MiB to 2.9 GiB; with 256 MiB, cuDNN
// could not measure them.
size_t MaxSearchWorkspace() {
  static const size_t bytes = [] {
    const char* v = std::getenv("DFLOW_CUDNN_SEARCH_MIB");
    char* end = nullptr;
    const unsigned long long mib = v != nullptr ? std::strtoull(v, &end, 10) : 0;
    if (v == nullptr || end == v || *end != '\0' || mib == 0 || mib > (size_t{1} << 20)) {
      return size_t{1} << 30;
    }
    return static_cast<size_t>(mib) << 20;
  }();
  return bytes;
}

// DFLOW_CUDNN_LOG=1: every algorithm search prints what cuDNN measured to stderr.
bool LogSearches() {
  static const bool log = EnvFlag("DFLOW_CUDNN_LOG");
  return log;
}

// An algorithm of one pass and the workspace it takes.
struct Choice {
  int algo = 0;
  size_t workspace = 0;
};

// The descriptors of one convolution geometry.
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;

  Status Create(const ConvGeometry& g, cudnnDataType_t type) {
    RETURN_IF_ERROR(SetTensor4d(x, type, g.n, g.c, g.h, g.w));
    RETURN_IF_ERROR(SetTensor4d(y, type, g.n, g.o, g.oh, g.ow));
    RETURN_IF_ERROR(w.Create());
    DFLOW_RETURN_IF_DNN(cudnnSetFilter4dDescriptor(w.get(), type, CUDNN_TENSOR_NCHW,
                                                   static_cast<int>(g.o), static_cast<int>(g.cg()),
                                                   static_cast<int>(g.kh), static_cast<int>(g.kw)),
                        "describing a filter");
    RETURN_IF_ERROR(conv.Create());
    DFLOW_RETURN_IF_DNN(
        cudnnSetConvolution2dDescriptor(
            conv.get(), static_cast<int>(g.pt), static_cast<int>(g.pl), static_cast<int>(g.sh),
            static_cast<int>(g.sw), static_cast<int>(g.dh), static_cast<int>(g.dw),
            CUDNN_CROSS_CORRELATION,
            type == CUDNN_DATA_HALF || type == CUDNN_DATA_BFLOAT16 ? CUDNN_DATA_FLOAT : type),
        "describing a convolution");
    DFLOW_RETURN_IF_DNN(cudnnSetConvolutionGroupCount(conv.get(), static_cast<int>(g.groups)),
                        "setting the groups");
    // f16 and bf16 on tensor cores, accumulating in f32; f32 without TF32 unless allowed.
    const bool half = type == CUDNN_DATA_HALF || type == CUDNN_DATA_BFLOAT16;
    const cudnnMathType_t math = half                                      ? CUDNN_TENSOR_OP_MATH
                                 : type == CUDNN_DATA_FLOAT && AllowTf32() ? CUDNN_DEFAULT_MATH
                                                                           : CUDNN_FMA_MATH;
    DFLOW_RETURN_IF_DNN(cudnnSetConvolutionMathType(conv.get(), math), "setting the math type");
    return Status::OK();
  }
};

template <Pass kPass>
class ConvKernel : public common::ConvBase<ConvKernel<kPass>, kPass> {
  using Base = common::ConvBase<ConvKernel<kPass>, kPass>;
  using Base::epilogue_;

 public:
  using Base::Base;

  Status Run(KernelContext& ctx, const Tensor& in0, const Tensor& in1,
             const ConvPassShapes& shapes) {
    const ConvGeometry& g = shapes.g;
    const Shape& out_shape = shapes.out;
    const DType dtype = in0.dtype();
    if (in1.dtype() != dtype || (epilogue_.bias && ctx.input(2).dtype() != dtype)) {
      return InvalidArgument("inputs of dtypes {} and {} differ", dtype, in1.dtype());
    }
    ASSIGN_OR_RETURN(cudnnDataType_t type, DnnConvType(dtype));
    ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(0, dtype, out_shape));
    if (out->num_elements() == 0) return Status::OK();
    ASSIGN_OR_RETURN(DnnCall call, DnnCall::Begin(ctx));
    if (g.oh == 0 || g.ow == 0 || g.n == 0) {  // nothing meets: zeros (then the epilogue)
      if (cudaMemsetAsync(out->raw_data(), 0, out->num_bytes(),  // 0 in every float type
                          reinterpret_cast<cudaStream_t>(call.stream())) != cudaSuccess) {
        return Internal("clearing {} bytes failed: {}", out->num_bytes(),
                        cudaGetErrorString(cudaGetLastError()));
      }
      return Epilogue(ctx, call, g, type, *out);
    }
    // Buffers in cuDNN's order: x, w, dy (one of x, w and dy's place the output).
    const void* x = kPass == Pass::kBackwardData ? nullptr : in0.raw_data();
    const void* w = kPass == Pass::kBackwardFilter ? nullptr : in1.raw_data();
    const void* dy = kPass == Pass::kBackwardData ? in0.raw_data() : in1.raw_data();
    void* result = out->raw_data();
    // cuDNN pads top and bottom (left and right) alike: other pads are applied to a padded copy
    // of x (or cropped from a padded dx), and cuDNN sees no padding.
    ConvGeometry gd = g;
    Tensor padded;
    const bool explicit_pad = g.pt != g.pb || g.pl != g.pr;
    if (explicit_pad && !ElemTypeOf(dtype)) {
      return InvalidArgument("no GPU Conv2D for {} with pads {}", dtype,
                             std::vector<int64_t>{g.pt, g.pl, g.pb, g.pr});
    }
    const ElemType et = ElemTypeOf(dtype).value_or(ElemType::kF32);
    if (explicit_pad) {
      gd.h = g.h + g.pt + g.pb;
      gd.w = g.w + g.pl + g.pr;
      gd.pt = gd.pb = gd.pl = gd.pr = 0;
      ASSIGN_OR_RETURN(padded, ctx.AllocateTemp(g.n * g.c * gd.h * gd.w * DTypeSize(dtype)));
      if (kPass == Pass::kBackwardData) {
        result = padded.raw_data();
      } else {
        RETURN_IF_ERROR(Launched(LaunchWindow2d(et, x, g.h, g.w, padded.raw_data(), gd.h, gd.w,
                                                g.n * g.c, -g.pt, -g.pl, call.stream()),
                                 "padding the input"));
        x = padded.raw_data();
      }
    }
    ConvDescs d;
    RETURN_IF_ERROR(d.Create(gd, type));
    ASSIGN_OR_RETURN(Choice choice, Choose(ctx, call, gd, type, d, x, w, dy, result));
    Tensor workspace;
    if (choice.workspace > 0) {
      ASSIGN_OR_RETURN(workspace, ctx.AllocateTemp(choice.workspace));
    }
    DnnScalars s(dtype);  // f32 scalars for f16 and bf16 data
    if constexpr (kPass == Pass::kForward) {
      DFLOW_RETURN_IF_DNN(
          cudnnConvolutionForward(call.handle(), s.one(), d.x.get(), x, d.w.get(), w, d.conv.get(),
                                  static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo),
                                  workspace.raw_data(), choice.workspace, s.zero(), d.y.get(),
                                  out->raw_data()),
          "convolution");
      return Epilogue(ctx, call, g, type, *out);
    } else if constexpr (kPass == Pass::kBackwardData) {
      DFLOW_RETURN_IF_DNN(cudnnConvolutionBackwardData(
                              call.handle(), s.one(), d.w.get(), w, d.y.get(), dy, d.conv.get(),
                              static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algo),
                              workspace.raw_data(), choice.workspace, s.zero(), d.x.get(), result),
                          "convolution's input gradient");
      if (explicit_pad) {
        RETURN_IF_ERROR(Launched(LaunchWindow2d(et, result, gd.h, gd.w, out->raw_data(), g.h, g.w,
                                                g.n * g.c, g.pt, g.pl, call.stream()),
                                 "cropping the input gradient"));
      }
    } else {
      DFLOW_RETURN_IF_DNN(
          cudnnConvolutionBackwardFilter(
              call.handle(), s.one(), d.x.get(), x, d.y.get(), dy, d.conv.get(),
              static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice.algo), workspace.raw_data(),
              choice.workspace, s.zero(), d.w.get(), out->raw_data()),
          "convolution's filter gradient");
    }
    return Status::OK();
  }

 private:
  // _FusedConv2D's bias (one per output channel) and ReLU, in place on y.
  Status Epilogue(KernelContext& ctx, DnnCall& call, const ConvGeometry& g, cudnnDataType_t type,
                  Tensor& y) {
    if (kPass != Pass::kForward || !epilogue_.bias) return Status::OK();
    DnnScalars s(y.dtype());
    TensorDesc yd, bd;
    RETURN_IF_ERROR(SetTensor4d(yd, type, g.n, g.o, g.oh, g.ow));
    RETURN_IF_ERROR(SetTensor4d(bd, type, 1, g.o, 1, 1));
    DFLOW_RETURN_IF_DNN(cudnnAddTensor(call.handle(), s.one(), bd.get(), ctx.input(2).raw_data(),
                                       s.one(), yd.get(), y.raw_data()),
                        "adding the bias");
    if (!epilogue_.relu) return Status::OK();
    ActivationDesc act;
    RETURN_IF_ERROR(act.Create());
    DFLOW_RETURN_IF_DNN(
        cudnnSetActivationDescriptor(act.get(), CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0),
        "describing the ReLU");
    DFLOW_RETURN_IF_DNN(cudnnActivationForward(call.handle(), act.get(), s.one(), yd.get(),
                                               y.raw_data(), s.zero(), yd.get(), y.raw_data()),
                        "ReLU");
    return Status::OK();
  }

  // The measured fastest algorithm of this pass for g, searched once (with the step's own
  // tensors; the output buffer is scribbled on and then written for real) and kept.
  Result<Choice> Choose(KernelContext& ctx, DnnCall& call, const ConvGeometry& g,
                        cudnnDataType_t type, ConvDescs& d, const void* x, const void* w,
                        const void* dy, void* out) {
    const int64_t* fields = reinterpret_cast<const int64_t*>(&g);
    std::string key = fmt::format("{}:{}", static_cast<int>(type),
                                  fmt::join(fields, fields + sizeof(ConvGeometry) / 8, ","));
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = choices_.find(key);
      if (it != choices_.end()) return it->second;
    }
    // The largest search workspace the device's allocator grants, up to the cap.
    Tensor workspace;
    size_t bytes = MaxSearchWorkspace();
    for (; bytes >= (size_t{1} << 20); bytes /= 4) {
      auto t = ctx.AllocateTemp(bytes);
      if (t.ok()) {
        workspace = std::move(*t);
        break;
      }
    }
    if (bytes < (size_t{1} << 20)) bytes = 0;
    constexpr int kRequested = 8;
    int found = 0;
    Choice choice;
    auto pick = [&](const auto* results) -> Status {
      if (LogSearches()) {
        const char* pass = kPass == Pass::kForward        ? "forward"
                           : kPass == Pass::kBackwardData ? "input-gradient"
                                                          : "filter-gradient";
        for (int i = 0; i < found; ++i) {
          std::fprintf(stderr,
                       "dflow cudnn %s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] stride %lld: "
                       "algo %d %.3f ms %zu bytes %s%s\n",
                       pass, static_cast<long long>(g.n), static_cast<long long>(g.c),
                       static_cast<long long>(g.h), static_cast<long long>(g.w),
                       static_cast<long long>(g.o), static_cast<long long>(g.cg()),
                       static_cast<long long>(g.kh), static_cast<long long>(g.kw),
                       static_cast<long long>(g.sh), static_cast<int>(results[i].algo),
                       results[i].time, results[i].memory, cudnnGetErrorString(results[i].status),
                       i == 0 ? " (first)" : "");
        }
      }
      for (int i = 0; i < found; ++i) {
        if (results[i].status == CUDNN_STATUS_SUCCESS) {
          choice = {static_cast<int>(results[i].algo), results[i].memory};
          return Status::OK();
        }
      }
      return Internal("cuDNN found no algorithm for this convolution ({} tried)", found);
    };
    void* ws = workspace.raw_data();
    if constexpr (kPass == Pass::kForward) {
      cudnnConvolutionFwdAlgoPerf_t results[kRequested];
      DFLOW_RETURN_IF_DNN(cudnnFindConvolutionForwardAlgorithmEx(
                              call.handle(), d.x.get(), x, d.w.get(), w, d.conv.get(), d.y.get(),
                              out, kRequested, &found, results, ws, bytes),
                          "searching convolution algorithms");
      RETURN_IF_ERROR(pick(results));
    } else if constexpr (kPass == Pass::kBackwardData) {
      cudnnConvolutionBwdDataAlgoPerf_t results[kRequested];
      DFLOW_RETURN_IF_DNN(cudnnFindConvolutionBackwardDataAlgorithmEx(
                              call.handle(), d.w.get(), w, d.y.get(), dy, d.conv.get(), d.x.get(),
                              out, kRequested, &found, results, ws, bytes),
                          "searching input-gradient algorithms");
      RETURN_IF_ERROR(pick(results));
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t results[kRequested];
      DFLOW_RETURN_IF_DNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(
                              call.handle(), d.x.get(), x, d.y.get(), dy, d.conv.get(), d.w.get(),
                              out, kRequested, &found, results, ws, bytes),
                          "searching filter-gradient algorithms");
      RETURN_IF_ERROR(pick(results));
    }
    std::lock_guard<std::mutex> lock(mu_);
    choices_.emplace(key, choice);
    return choice;
  }

  std::mutex mu_;
  std::map<std::string, Choice> choices_;
};

}  // namespace

Status RegisterConvKernels() { return common::RegisterConvKernels<ConvKernel>("GPU"); }

}  // namespace dflow::cuda
