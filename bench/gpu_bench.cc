// GPU kernels against the libraries they are built on, in one process on gpu:0:
//   BM_GpuMatMul/N          an f32 N x N x N MatMul through a dflow session, timed to its end
//   BM_CublasSgemm/N        the same product by cublasSgemm called directly, timed alike (wall
//                           clock to the host seeing its end; GPU time in counter gpu_ms)
//   BM_GpuConv2D            a 3x3 f32 convolution of ResNet-50's second stage at CIFAR shapes
//                           ([128, 128, 16, 16] * [128, 128, 3, 3], pads 1) through a session
//   BM_CudnnConv2D          the same by cudnnConvolutionForward with cudnnFind's best algorithm
// scripts/gpu_bench.sh runs this on a GPU machine and prints the ratios. Without a GPU every
// benchmark is skipped with the reason.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "ops/array_ops.h"
#include "ops/conv_ops.h"
#include "ops/cuda/cuda_device.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "runtime/session.h"

namespace dflow {
namespace {

bool SkipWithoutGpu(benchmark::State& state) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) return false;
  state.SkipWithError(("no CUDA GPU here: " + why).c_str());
  return true;
}

// A session on gpu:0 computing `make(root)` from initialised variables; each run fetches a
// scalar queued after it, so a run is timed to the product's end.
void TimeSessionOp(benchmark::State& state, const std::vector<Shape>& shapes,
                   const std::function<Output(const Scope&, const std::vector<Output>&)>& make) {
  Scope root = Scope::NewRootScope();
  std::vector<Output> vars;
  std::vector<std::string> init;
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto v = ops::InitializedVariable(root, shapes[i], ops::Initializer::Uniform(-1, 1, i + 1));
    vars.push_back(v.var);
    init.push_back(v.init.node_name());
  }
  Output result = make(root, vars);
  Output done = ops::Identity(root.WithOpName("done").WithControlDependencies({result}),
                              ops::Const(root, 1.0f));
  SessionOptions options;
  options.device = "gpu:0";
  auto session = Session::Create(root, options);
  if (!session.ok()) {
    state.SkipWithError(session.status().ToString().c_str());
    return;
  }
  if (auto s = (*session)->Run({}, {}, init); !s.ok()) {
    state.SkipWithError(s.status().ToString().c_str());
    return;
  }
  for (int i = 0; i < 5; ++i) (void)(*session)->Run({}, {done.name()});
  for (auto _ : state) {
    auto out = (*session)->Run({}, {done.name()});
    benchmark::DoNotOptimize(out);
  }
}

void BM_GpuMatMul(benchmark::State& state) {
  if (SkipWithoutGpu(state)) return;
  const int64_t n = state.range(0);
  TimeSessionOp(state, {Shape{n, n}, Shape{n, n}},
                [](const Scope& s, const auto& v) { return ops::MatMul(s, v[0], v[1]); });
  state.counters["TFLOPS"] =
      benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e12, benchmark::Counter::kIsRate);
}

// Times `launch` on `stream` as the session runs are timed: by the wall clock, from the launch
// to the host seeing its end (a dflow Run returns once its fetch reached the host), so both
// sides pay the launch and the wait alike. The GPU time alone (CUDA events) is reported as the
// counter gpu_ms.
template <typename F>
void TimeToCompletion(benchmark::State& state, cudaStream_t stream, F&& launch) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 5; ++i) launch();
  cudaStreamSynchronize(stream);
  double gpu_ms = 0;
  for (auto _ : state) {
    cudaEventRecord(start, stream);
    launch();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    gpu_ms += ms;
  }
  if (state.iterations() > 0) state.counters["gpu_ms"] = gpu_ms / state.iterations();
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

void BM_CublasSgemm(benchmark::State& state) {
  if (SkipWithoutGpu(state)) return;
  const int n = static_cast<int>(state.range(0));
  const size_t bytes = sizeof(float) * n * n;
  float *a, *b, *c;
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  cudaMalloc(&c, bytes);
  cudaMemset(a, 0, bytes);
  cudaMemset(b, 0, bytes);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cublasHandle_t handle;
  cublasCreate(&handle);
  cublasSetStream(handle, stream);
  cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH);  // f32, no TF32, as dflow's MatMul
  const float one = 1, zero = 0;
  TimeToCompletion(state, stream, [&] {
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b, n, a, n, &zero, c, n);
  });
  state.counters["TFLOPS"] =
      benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e12, benchmark::Counter::kIsRate);
  cublasDestroy(handle);
  cudaStreamDestroy(stream);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

constexpr int kN = 128, kC = 128, kH = 16, kW = 16, kO = 128;

void BM_GpuConv2D(benchmark::State& state) {
  if (SkipWithoutGpu(state)) return;
  TimeSessionOp(state, {Shape{kN, kC, kH, kW}, Shape{kO, kC, 3, 3}},
                [](const Scope& s, const auto& v) {
                  return ops::Conv2D(s, v[0], v[1], {.pads = {1, 1, 1, 1}});
                });
}

void BM_CudnnConv2D(benchmark::State& state) {
  if (SkipWithoutGpu(state)) return;
  cudnnHandle_t handle;
  cudnnCreate(&handle);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cudnnSetStream(handle, stream);
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  cudnnCreateTensorDescriptor(&xd);
  cudnnCreateTensorDescriptor(&yd);
  cudnnCreateFilterDescriptor(&wd);
  cudnnCreateConvolutionDescriptor(&cd);
  cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kN, kC, kH, kW);
  cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kN, kO, kH, kW);
  cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, kO, kC, 3, 3);
  cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
  cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH);  // f32, no TF32, as dflow's default
  float *x, *w, *y;
  void* ws;
  const size_t ws_bytes = size_t{256} << 20;
  cudaMalloc(&x, sizeof(float) * kN * kC * kH * kW);
  cudaMalloc(&w, sizeof(float) * kO * kC * 9);
  cudaMalloc(&y, sizeof(float) * kN * kO * kH * kW);
  cudaMalloc(&ws, ws_bytes);
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int found = 0;
  cudnnFindConvolutionForwardAlgorithmEx(handle, xd, x, wd, w, cd, yd, y, 8, &found, perf, ws,
                                         ws_bytes);
  const float one = 1, zero = 0;
  TimeToCompletion(state, stream, [&] {
    cudnnConvolutionForward(handle, &one, xd, x, wd, w, cd, perf[0].algo, ws, perf[0].memory, &zero,
                            yd, y);
  });
  cudaFree(ws);
  cudaFree(y);
  cudaFree(w);
  cudaFree(x);
  cudnnDestroyConvolutionDescriptor(cd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyTensorDescriptor(xd);
  cudaStreamDestroy(stream);
  cudnnDestroy(handle);
}

BENCHMARK(BM_GpuMatMul)->Arg(4096)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_CublasSgemm)->Arg(4096)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_GpuConv2D)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_CudnnConv2D)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace
}  // namespace dflow

BENCHMARK_MAIN();
