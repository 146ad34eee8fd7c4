// Inputs the fuzz targets (scripts/fuzz.sh) once found breaking a loader, kept in
// tests/serialization/fuzz_regressions/ and named "<target>-...", and the fuzz targets' seed
// corpus (fuzz/seed_corpus.h): each must keep the loader's contract (fuzz/loader_contract.h).
// Under the sanitizer build this also catches memory and undefined-behaviour errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "fuzz/loader_contract.h"
#include "fuzz/seed_corpus.h"
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

// What `scripts/fuzz.sh --check` ran through each libFuzzer target: every seed once.
TEST(FuzzRegressionsTest, EverySeedKeepsTheLoaderContract) {
  namespace fs = std::filesystem;
  ops::RegisterStandardOps();
  const fs::path dir = fs::path(::testing::TempDir()) / ("seeds_" + std::to_string(getpid()));
  fs::remove_all(dir);
  ASSERT_TRUE(fuzz::WriteSeedCorpus(dir).ok());
  std::vector<std::string> targets = {"graph_file", "checkpoint_file", "npy", "wire"};
  if (DFLOW_HAS_ONNX && fs::exists("/usr/share/libonnx-testdata/data/node")) {
    targets.push_back("onnx");
  }
  for (const std::string& target : targets) {
    const fuzz::ProblemCheck check = fuzz::ProblemCheckFor(target);
    ASSERT_NE(check, nullptr) << target;
    int seeds = 0;
    for (const auto& entry : fs::directory_iterator(dir / target)) {
      auto bytes = serialization::ReadFile(entry.path().string());
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      EXPECT_EQ(check(*bytes), "") << target << " seed " << entry.path().filename();
      ++seeds;
    }
    // Valid inputs of every kind the target decodes (fuzz_seeds writes 2 to 60 a target).
    EXPECT_GE(seeds, 2) << target;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dflow
