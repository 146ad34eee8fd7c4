// The SIM backend of the tests (sim_device.h): built the way a backend is (docs/architecture.md,
// "A new device type": a device class and a DeviceType table with its kernels), and registered
// by the tests that use it (DeviceFactory::Global().Register(SimDeviceType())) rather than by
// ops/CMakeLists.txt, so that it stays out of the library.
#pragma once

#include <functional>

#include "framework/device_type.h"
#include "ops/sim/sim_device.h"

namespace dflow::sim {

// The "SIM" device type. `on_create`, when set, is told of every device made (for tests that
// count its copies).
DeviceType SimDeviceType(std::function<void(SimDevice*)> on_create = nullptr);

// SIM's kernels: the kernels every device type with memory of its own shares (ops/common/), and
// for every other op the CPU's kernel (SIM's buffers are host memory underneath). Idempotent.
// REQUIRES: the standard ops registered (ops::RegisterStandardOps()) before the SIM type.
Status RegisterSimKernels();

}  // namespace dflow::sim
