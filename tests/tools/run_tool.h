// Runs a command-line tool for the tools' end-to-end tests, without a shell.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/subprocess.h"

namespace dflow::testing {

struct Ran {
  int code;            // exit status; -1 if the tool did not exit normally
  std::string output;  // stdout and stderr, interleaved
};

// Runs `binary` with `args` exactly as given (no shell: nothing in them is interpreted).
inline Ran RunBinary(const std::string& binary, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  auto ran = tools::RunProgram(argv, "", /*merge_stderr=*/true);
  if (!ran.ok()) return {-1, ran.status().ToString()};
  return {ran->exit_code, ran->out};
}

// The same with `args` split at spaces (no quoting: a path with a space needs the form above).
inline Ran RunBinary(const std::string& binary, const std::string& args) {
  std::vector<std::string> split;
  size_t begin = 0;
  while (begin <= args.size()) {
    size_t end = args.find(' ', begin);
    if (end == std::string::npos) end = args.size();
    if (end > begin) split.push_back(args.substr(begin, end - begin));
    begin = end + 1;
  }
  return RunBinary(binary, split);
}

// A path in the test's temporary directory.
inline std::string Temp(const std::string& name) { return ::testing::TempDir() + "/" + name; }

}  // namespace dflow::testing
