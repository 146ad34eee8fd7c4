// The CPU backend: the "CPU" device type (ops/cpu/cpu_device.h) and its kernels, oneDNN
// primitives and plain loops (ops/cpu/*_kernels.cc), with the kernels every device type shares
// (ops/common/). ops/CMakeLists.txt adds it with one line; DeviceFactory::Global() registers it.
#pragma once

#include "framework/device_type.h"
#include "graph/status.h"

namespace dflow::cpu {

DeviceType CpuDeviceType();

// Every CPU kernel (framework/kernel.h) under device type "CPU": the type's register_kernels.
Status RegisterCpuKernels();

}  // namespace dflow::cpu
