// The conformance suites of this binary run on every device type this build registers that has
// a device here (the CPU; the GPU where there is one).
#include "framework/device_factory.h"
#include "framework/device_types_under_test.h"

namespace dflow::testing {

std::vector<std::string> DeviceTypesUnderTest() { return DeviceFactory::Global().types(); }

}  // namespace dflow::testing
