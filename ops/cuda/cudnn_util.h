// Internal: what the cuDNN kernels share. A cuDNN handle per GPU bound to the kernel's compute
// stream (DnnCall), descriptors that destroy themselves, the cuDNN type of a dtype, scaling
// factors of the data's precision and cuDNN errors as a Status.
#pragma once

#include <cudnn.h>

#include <mutex>
#include <string_view>

#include "framework/kernel.h"
#include "ops/cuda/cuda_context.h"

namespace dflow::cuda {

// Internal naming `what` and cuDNN's message for `s`.
Status DnnError(cudnnStatus_t s, std::string_view what);

#define DFLOW_RETURN_IF_DNN(call, what)                    \
  do {                                                     \
    cudnnStatus_t dnn_status_ = (call);                    \
    if (dnn_status_ != CUDNN_STATUS_SUCCESS) {             \
      return ::dflow::cuda::DnnError(dnn_status_, (what)); \
    }                                                      \
  } while (false)

// The process's cuDNN handle for the kernel's GPU, set to the device's compute stream and held
// for the call's lifetime: a cuDNN handle carries its stream, so the executor's threads take
// turns (their work is queued on the one stream anyway; the lock covers enqueueing only).
class DnnCall {
 public:
  static Result<DnnCall> Begin(KernelContext& ctx);
  cudnnHandle_t handle() const { return handle_; }
  CudaStream stream() const { return stream_; }

 private:
  DnnCall(std::unique_lock<std::mutex> lock, cudnnHandle_t handle, CudaStream stream)
      : lock_(std::move(lock)), handle_(handle), stream_(stream) {}
  std::unique_lock<std::mutex> lock_;
  cudnnHandle_t handle_;
  CudaStream stream_;
};

// CUDNN_DATA_FLOAT or CUDNN_DATA_DOUBLE; InvalidArgument naming `op` for other dtypes.
Result<cudnnDataType_t> DnnFloatType(DType dtype, std::string_view op);
// A convolution's data type: DnnFloatType's, and f16 and bf16 (computed in f32).
Result<cudnnDataType_t> DnnConvType(DType dtype);

// 1 and 0 in the precision cuDNN takes its alpha and beta in for data of `dtype` (double for
// f64, float otherwise).
struct DnnScalars {
  explicit DnnScalars(DType dtype) : f64_(dtype == DType::kF64) {}
  const void* one() const { return f64_ ? static_cast<const void*>(&d1_) : &f1_; }
  const void* zero() const { return f64_ ? static_cast<const void*>(&d0_) : &f0_; }

 private:
  bool f64_;
  float f1_ = 1, f0_ = 0;
  double d1_ = 1, d0_ = 0;
};

// A cuDNN descriptor that is destroyed with its owner.
template <typename T, cudnnStatus_t (*kCreate)(T*), cudnnStatus_t (*kDestroy)(T)>
class DnnDescriptor {
 public:
  DnnDescriptor() = default;
  DnnDescriptor(const DnnDescriptor&) = delete;
  DnnDescriptor& operator=(const DnnDescriptor&) = delete;
  ~DnnDescriptor() {
    if (d_ != nullptr) kDestroy(d_);
  }
  Status Create() {
    DFLOW_RETURN_IF_DNN(kCreate(&d_), "creating a descriptor");
    return Status::OK();
  }
  T get() const { return d_; }

 private:
  T d_ = nullptr;
};

using TensorDesc = DnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                                 cudnnDestroyTensorDescriptor>;
using FilterDesc = DnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                                 cudnnDestroyFilterDescriptor>;
using ConvDesc = DnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                               cudnnDestroyConvolutionDescriptor>;
using PoolDesc = DnnDescriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                               cudnnDestroyPoolingDescriptor>;
using ActivationDesc = DnnDescriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                                     cudnnDestroyActivationDescriptor>;

// Creates `d` as a packed NCHW tensor; InvalidArgument when a dimension exceeds cuDNN's int.
Status SetTensor4d(TensorDesc& d, cudnnDataType_t type, int64_t n, int64_t c, int64_t h, int64_t w);

// Whether convolutions may compute f32 with TF32 tensor cores (as PyTorch's cuDNN convolutions
// do by default): the environment variable DFLOW_ALLOW_TF32=1. Off by default, so that f32
// results match the CPU's within f32 rounding.
bool AllowTf32();
// Whether environment variable `name` is set to 1 (read on every call: cache it where hot).
bool EnvFlag(const char* name);

}  // namespace dflow::cuda
