#include "ops/cpu/cpu_backend.h"

#include "ops/common/common_kernels.h"
#include "ops/cpu/cpu_device.h"
#include "ops/cpu/cpu_kernels.h"

namespace dflow::cpu {

Status RegisterCpuKernels() {
  RETURN_IF_ERROR(RegisterArrayKernels());
  RETURN_IF_ERROR(RegisterElementwiseKernels());
  RETURN_IF_ERROR(RegisterMatMulKernels());
  RETURN_IF_ERROR(RegisterAttentionKernels());
  RETURN_IF_ERROR(RegisterReduceKernels());
  RETURN_IF_ERROR(RegisterStateKernels());
  RETURN_IF_ERROR(RegisterUnaryKernels());
  RETURN_IF_ERROR(RegisterNnKernels());
  RETURN_IF_ERROR(RegisterTrainingKernels());
  RETURN_IF_ERROR(RegisterRandomKernels());
  RETURN_IF_ERROR(RegisterConvKernels());
  RETURN_IF_ERROR(RegisterPoolKernels());
  RETURN_IF_ERROR(RegisterManipKernels());
  RETURN_IF_ERROR(RegisterIndexKernels());
  RETURN_IF_ERROR(RegisterShapeKernels());
  RETURN_IF_ERROR(RegisterImageKernels());
  RETURN_IF_ERROR(RegisterBatchNormKernels());
  RETURN_IF_ERROR(RegisterFusedUpdateKernels());
  RETURN_IF_ERROR(common::RegisterCommonKernels("CPU"));
  return Status::OK();
}

DeviceType CpuDeviceType() {
  DeviceType t;
  t.name = "CPU";
  t.create = [](const DeviceName& name,
                const DeviceOptions& options) -> Result<std::unique_ptr<Device>> {
    ASSIGN_OR_RETURN(auto cpu, CpuDevice::Create(name, options));
    return std::unique_ptr<Device>(std::move(cpu));
  };
  t.register_kernels = RegisterCpuKernels;
  t.channel_block = ChannelBlock;
  return t;
}

}  // namespace dflow::cpu
