// CudaContext: what a CUDA device hands its kernels (KernelContext::device_context): the GPU's
// ordinal and the compute stream every kernel of the device enqueues on, in order. A kernel
// launches its work there and returns; the host waits only where a value reaches host memory.
// No CUDA header is needed here: the stream is CUDA's opaque cudaStream_t. The device's copies
// (DeviceContext's) are the CUDA device's own (ops/cuda/cuda_device.cc).
#pragma once

#include "framework/device_context.h"
#include "ops/cuda/cuda_stream.h"

namespace dflow {

class CudaContext : public DeviceContext {
 public:
  CudaContext(int ordinal, CudaStream stream) : ordinal_(ordinal), stream_(stream) {}
  int ordinal() const { return ordinal_; }
  CudaStream stream() const { return stream_; }

 private:
  int ordinal_;
  CudaStream stream_;
};

}  // namespace dflow
