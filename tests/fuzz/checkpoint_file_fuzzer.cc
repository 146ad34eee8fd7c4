// libFuzzer target: checkpoint files. Any input that breaks the loader's contract
// (fuzz/loader_contract.h) aborts, so libFuzzer keeps it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fuzz/loader_contract.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string problem =
      dflow::fuzz::CheckpointProblem(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!problem.empty()) {
    std::fprintf(stderr, "fuzz: contract broken: %s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
