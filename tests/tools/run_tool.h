// Runs a command-line tool for the tools' end-to-end tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace dflow::testing {

struct Ran {
  int code;            // exit status; -1 if the tool did not exit normally
  std::string output;  // stdout and stderr
};

inline Ran RunBinary(const std::string& binary, const std::string& args) {
  std::string command = binary + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  Ran r{-1, ""};
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A path in the test's temporary directory.
inline std::string Temp(const std::string& name) { return ::testing::TempDir() + "/" + name; }

}  // namespace dflow::testing
