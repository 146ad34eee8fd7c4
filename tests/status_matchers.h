// Status assertions for tests that need nothing beyond graph/status.h (the transport tests build
// with ThreadSanitizer without the rest of dflow).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/status.h"

namespace dflow::testing {

// The status message contains every string in `parts`.
inline ::testing::AssertionResult MessageHas(const Status& s,
                                             const std::vector<std::string>& parts) {
  for (const auto& p : parts) {
    if (s.message().find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << p << "' not in: " << s.ToString();
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace dflow::testing
