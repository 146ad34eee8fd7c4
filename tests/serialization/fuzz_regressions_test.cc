// Inputs the fuzz targets (scripts/fuzz.sh) once found breaking a loader, kept in
// tests/serialization/fuzz_regressions/ and named "<target>-...": each must now keep the
// loader's contract (fuzz/loader_contract.h). Under the sanitizer build this also catches the
// memory and undefined-behaviour errors they caused.
#include <gtest/gtest.h>

#include <filesystem>

#include "fuzz/loader_contract.h"
#include "ops/register.h"
#include "serialization/file_util.h"

namespace dflow {
namespace {

TEST(FuzzRegressionsTest, EveryKeptInputKeepsTheLoaderContract) {
  ops::RegisterStandardOps();
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(DFLOW_FUZZ_REGRESSIONS_DIR)) {
    const std::string name = entry.path().filename().string();
    auto bytes = serialization::ReadFile(entry.path().string());
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    const std::string target = name.substr(0, name.find('-'));
    if (target == "onnx" && !DFLOW_HAS_ONNX) continue;  // a build without ONNX import
    const fuzz::ProblemCheck check = fuzz::ProblemCheckFor(target);
    if (check == nullptr) {
      ADD_FAILURE()
          << name
          << ": not named after a fuzz target (graph_file-, checkpoint_file-, npy-, wire-, onnx-)";
      continue;
    }
    EXPECT_EQ(check(*bytes), "") << name;
    ++files;
  }
  EXPECT_GE(files, 1);
}

}  // namespace
}  // namespace dflow
