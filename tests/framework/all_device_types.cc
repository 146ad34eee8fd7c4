// The conformance suites of this binary run on every device type this build registers that has
// a device here (the CPU; the GPU where there is one).
#include <gtest/gtest.h>

#include <algorithm>

#include "framework/device_factory.h"
#include "framework/device_types_under_test.h"
#include "gpu_required.h"

namespace dflow::testing {

std::vector<std::string> DeviceTypesUnderTest() { return DeviceFactory::Global().types(); }

}  // namespace dflow::testing

namespace dflow {
namespace {

// On a GPU machine (DFLOW_REQUIRE_GPU set) the suites must hold the GPU too: a CUDA start-up
// failure would otherwise leave only the CPU's cases, all green.
TEST(DeviceTypesUnderTest, IncludeTheGpuWhereOneIsRequired) {
  if (!testing::GpuRequired()) GTEST_SKIP() << "DFLOW_REQUIRE_GPU is not set";
  const auto types = testing::DeviceTypesUnderTest();
  EXPECT_EQ(std::count(types.begin(), types.end(), "GPU"), 1)
      << "DFLOW_REQUIRE_GPU is set but this process registered no GPU device type";
}

}  // namespace
}  // namespace dflow
