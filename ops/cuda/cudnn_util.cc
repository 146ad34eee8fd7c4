#include "ops/cuda/cudnn_util.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <limits>
#include <map>
#include <memory>

namespace dflow::cuda {
namespace {

struct HandleSlot {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
};

// The handle slot of GPU `ordinal`, its handle made on first use (with that GPU current, as
// cudnnCreate binds a handle to the current device).
Result<HandleSlot*> Slot(int ordinal) {
  static std::mutex mu;
  static auto* slots = new std::map<int, std::unique_ptr<HandleSlot>>;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*slots)[ordinal];
  if (slot == nullptr) {
    int previous = 0;
    cudaGetDevice(&previous);
    if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) {
      return Internal("making gpu:{} current for cuDNN failed: {}", ordinal, cudaGetErrorString(e));
    }
    cudnnHandle_t h = nullptr;
    cudnnStatus_t s = cudnnCreate(&h);
    cudaSetDevice(previous);
    if (s != CUDNN_STATUS_SUCCESS)
      return DnnError(s, fmt::format("creating a handle for gpu:{}", ordinal));
    slot = std::make_unique<HandleSlot>();
    slot->handle = h;
  }
  return slot.get();
}

}  // namespace

Status DnnError(cudnnStatus_t s, std::string_view what) {
  return Internal("cuDNN {} failed: {} ({})", what, cudnnGetErrorString(s), static_cast<int>(s));
}

Result<DnnCall> DnnCall::Begin(KernelContext& ctx) {
  auto* cuda = dynamic_cast<CudaContext*>(ctx.device_context());
  if (cuda == nullptr) return Internal("a GPU kernel ran without the CUDA device's context");
  ASSIGN_OR_RETURN(HandleSlot * slot, Slot(cuda->ordinal()));
  std::unique_lock<std::mutex> lock(slot->mu);
  DFLOW_RETURN_IF_DNN(cudnnSetStream(slot->handle, reinterpret_cast<cudaStream_t>(cuda->stream())),
                      "setting the stream");
  return DnnCall(std::move(lock), slot->handle, cuda->stream());
}

Result<cudnnDataType_t> DnnFloatType(DType dtype, std::string_view op) {
  if (dtype == DType::kF32) return CUDNN_DATA_FLOAT;
  if (dtype == DType::kF64) return CUDNN_DATA_DOUBLE;
  return InvalidArgument("no GPU {} for dtype {} (f32 or f64)", op, dtype);
}

Result<cudnnDataType_t> DnnConvType(DType dtype) {
  if (dtype == DType::kF16) return CUDNN_DATA_HALF;
  if (dtype == DType::kBF16) return CUDNN_DATA_BFLOAT16;
  if (dtype == DType::kF32 || dtype == DType::kF64) return DnnFloatType(dtype, "Conv2D");
  return InvalidArgument("no GPU Conv2D for dtype {} (f32, f64, f16 or bf16)", dtype);
}

Status SetTensor4d(TensorDesc& d, cudnnDataType_t type, int64_t n, int64_t c, int64_t h,
                   int64_t w) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (n > kMax || c > kMax || h > kMax || w > kMax || n * c * h * w > kMax) {
    return InvalidArgument("tensor [{}, {}, {}, {}] is too large for cuDNN (int32 sizes)", n, c, h,
                           w);
  }
  RETURN_IF_ERROR(d.Create());
  DFLOW_RETURN_IF_DNN(
      cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, type, static_cast<int>(n),
                                 static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)),
      "describing a tensor");
  return Status::OK();
}

bool EnvFlag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string_view(v) == "1";
}

bool AllowTf32() {
  static const bool allow = EnvFlag("DFLOW_ALLOW_TF32");
  return allow;
}

}  // namespace dflow::cuda
