// The CUDA backend: the "GPU" device type (ops/cuda/cuda_device.h: a GPU's stream, memory and
// copies; CUDA IPC between processes, ops/cuda/cuda_ipc.h), its figures for the placer
// (ops/cuda/cuda_calibration.h) and its kernels on cuBLAS, cuDNN and own CUDA kernels. Built where
// the CUDA toolkit is found (DFLOW_WITH_CUDA); ops/CMakeLists.txt adds it with one line. On a
// machine without a GPU or driver the type has no device (its count says why).
#pragma once

#include "framework/device_type.h"
#include "graph/status.h"

namespace dflow::cuda {

DeviceType CudaDeviceType();

// Every GPU kernel (framework/kernel.h) under device type "GPU": the type's register_kernels.
Status RegisterCudaKernels();

}  // namespace dflow::cuda
