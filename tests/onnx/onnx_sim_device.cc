// onnx_sim_tests: the ONNX backend node tests with the stand-in SIM device type registered
// (tests/ops/sim/: a device of its own memory, the CPU's kernels), so that the runner's pass over
// the other device types runs here as it does on a GPU machine: every case that passes on the
// CPU is run again on SIM, its feeds, fetches and host-read operands crossing device memory.
#include "framework/device_factory.h"
#include "ops/register.h"
#include "ops/sim/sim_backend.h"

namespace dflow {
namespace {

const bool kSimRegistered = [] {
  ops::RegisterStandardOps();
  return DeviceFactory::Global().Register(sim::SimDeviceType()).ok() &&
         sim::RegisterSimKernels().ok();
}();

}  // namespace
}  // namespace dflow
