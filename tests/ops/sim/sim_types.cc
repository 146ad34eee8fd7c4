// The conformance suites of the SIM binary run on the stand-in "SIM" alone, registered here the
// way a test registers a device type (framework/device_factory.h).
#include "framework/device_factory.h"
#include "framework/device_types_under_test.h"
#include "ops/register.h"
#include "ops/sim/sim_backend.h"

namespace dflow::testing {

std::vector<std::string> DeviceTypesUnderTest() {
  static const bool registered = [] {
    ops::RegisterStandardOps();
    return DeviceFactory::Global().Register(sim::SimDeviceType()).ok();
  }();
  if (!registered) return {};
  return {"SIM"};
}

}  // namespace dflow::testing
