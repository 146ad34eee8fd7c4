// Whether this run demands a GPU: scripts/gpu_check.sh sets DFLOW_REQUIRE_GPU=1 on a GPU machine,
// where a GPU test that skips for want of a GPU (a CUDA start-up failure, a missing library)
// would otherwise look green. Elsewhere the GPU tests skip, saying why.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace dflow::testing {

// True when DFLOW_REQUIRE_GPU is set to anything but "" or "0".
inline bool GpuRequired() {
  const char* v = std::getenv("DFLOW_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace dflow::testing

// In a test body or SetUp: without a GPU (`count` == 0, `why` the reason) the test skips, or
// fails where DFLOW_REQUIRE_GPU is set.
#define DFLOW_SKIP_WITHOUT_GPU(count, why)                                         \
  do {                                                                             \
    if ((count) == 0) {                                                            \
      if (::dflow::testing::GpuRequired()) {                                       \
        FAIL() << "DFLOW_REQUIRE_GPU is set but no CUDA GPU was found: " << (why); \
      }                                                                            \
      GTEST_SKIP() << "no CUDA GPU here: " << (why);                               \
    }                                                                              \
  } while (0)
