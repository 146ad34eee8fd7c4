// The device types a conformance binary holds to the device and op conformance suites
// (device_conformance.cc, tests/ops/conformance/). Each binary defines it once:
// op_conformance_tests with every type this build registers (all_device_types.cc), a stand-in's
// binary with its own type, registered first (tests/ops/sim/sim_types.cc).
#pragma once

#include <string>
#include <vector>

namespace dflow::testing {

std::vector<std::string> DeviceTypesUnderTest();

}  // namespace dflow::testing
