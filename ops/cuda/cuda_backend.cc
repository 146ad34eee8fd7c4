#include "ops/cuda/cuda_backend.h"

#include "ops/common/common_kernels.h"
#include "ops/cuda/cuda_calibration.h"
#include "ops/cuda/cuda_device.h"
#include "ops/cuda/cuda_kernels.h"

namespace dflow::cuda {

Status RegisterCudaKernels() {
  // Feeds, fetches, constants, variables and Send/Recv, through the device's copies.
  RETURN_IF_ERROR(common::RegisterDeviceMemoryKernels("GPU"));
  RETURN_IF_ERROR(RegisterArrayKernels());
  RETURN_IF_ERROR(RegisterElementwiseKernels());
  RETURN_IF_ERROR(RegisterUnaryKernels());
  RETURN_IF_ERROR(RegisterReduceKernels());
  RETURN_IF_ERROR(RegisterMatMulKernels());
  RETURN_IF_ERROR(RegisterNnKernels());
  RETURN_IF_ERROR(RegisterTrainingKernels());
  RETURN_IF_ERROR(RegisterConvKernels());
  RETURN_IF_ERROR(RegisterPoolKernels());
  RETURN_IF_ERROR(RegisterBatchNormKernels());
  return Status::OK();
}

DeviceType CudaDeviceType() {
  DeviceType t;
  t.name = "GPU";
  t.create = [](const DeviceName& name,
                const DeviceOptions& options) -> Result<std::unique_ptr<Device>> {
    ASSIGN_OR_RETURN(auto gpu, CudaDevice::Create(name, options.memory_limit));
    return std::unique_ptr<Device>(std::move(gpu));
  };
  t.register_kernels = RegisterCudaKernels;
  t.count = [](std::string* why) { return CudaDeviceCount(why); };
  t.calibrate = [](Device& device, DeviceSpec spec) -> Result<DeviceSpec> {
    auto& gpu = static_cast<CudaDevice&>(device);  // the type's own device
    ASSIGN_OR_RETURN(CudaCalibration c, CachedCudaCalibration(gpu.ordinal()));
    return c.Apply(std::move(spec));
  };
  // Host memory to and from a GPU, and GPU to GPU, from the GPUs' calibrations.
  t.link = [](Device& from, Device& to) -> std::optional<LinkSpec> {
    auto* src = from.type() == "GPU" ? static_cast<CudaDevice*>(&from) : nullptr;
    auto* dst = to.type() == "GPU" ? static_cast<CudaDevice*>(&to) : nullptr;
    if (src != nullptr && dst != nullptr) {
      auto c = CachedCudaCalibration(src->ordinal());
      const size_t peer = static_cast<size_t>(dst->ordinal());
      if (!c.ok() || peer >= c->to_peer.size() || c->to_peer[peer].bandwidth <= 0) {
        return std::nullopt;
      }
      return c->to_peer[peer];
    }
    if (src != nullptr && to.allocator()->host_accessible()) {
      auto c = CachedCudaCalibration(src->ordinal());
      return c.ok() ? std::optional<LinkSpec>(c->device_to_host) : std::nullopt;
    }
    if (dst != nullptr && from.allocator()->host_accessible()) {
      auto c = CachedCudaCalibration(dst->ordinal());
      return c.ok() ? std::optional<LinkSpec>(c->host_to_device) : std::nullopt;
    }
    return std::nullopt;
  };
  return t;
}

}  // namespace dflow::cuda
