// libFuzzer target for one file loader, chosen at build time by DFLOW_FUZZ_TARGET ("graph_file":
// graph files in both forms, "checkpoint_file", "npy"). Any input that breaks the loader's
// contract (fuzz/loader_contract.h) aborts, so libFuzzer keeps it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fuzz/loader_contract.h"
#include "ops/register.h"

namespace {
const dflow::fuzz::ProblemCheck kCheck = dflow::fuzz::ProblemCheckFor(DFLOW_FUZZ_TARGET);
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (kCheck == nullptr) {
    std::fprintf(stderr, "fuzz: unknown target '%s'\n", DFLOW_FUZZ_TARGET);
    std::abort();
  }
  dflow::ops::RegisterStandardOps();  // graph validation checks ops against the registry
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string problem = kCheck(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!problem.empty()) {
    std::fprintf(stderr, "fuzz: contract broken: %s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
