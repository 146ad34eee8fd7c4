// Runs another program without a shell: the arguments go to it as they are, so nothing in them
// (a file name with "$(...)", backticks, spaces or quotes) is ever interpreted.
//
//   auto ran = tools::RunProgram({"dot", "-Tsvg"}, dot_text);
//   if (ran.ok() && ran->exit_code == 0) Write(ran->out);
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace dflow::tools {

// The first executable file named `program` in the folders of $PATH (or of `path` when given),
// as execvp would find it; a name with a '/' is checked as it is. nullopt when there is none.
std::optional<std::string> FindProgram(const std::string& program,
                                       std::optional<std::string> path = std::nullopt);

struct ProgramResult {
  int exit_code = -1;  // its exit status; -1 when a signal ended it (`signal` says which)
  int signal = 0;
  std::string out;  // everything it wrote to stdout
  std::string err;  // and to stderr
};

// Starts argv[0] (found with FindProgram) with `argv`, writes `input` to its stdin and closes
// it, collects stdout and stderr until it exits, and reaps it. Never waits on a full pipe: the
// three pipes are served together. A program that stops reading early is not an error here
// (its exit status says what happened). NotFound naming the program when it is not on $PATH;
// Internal naming it when it cannot be started. With `merge_stderr` its stderr goes to `out` too,
// interleaved as written (as a shell's 2>&1 would).
// REQUIRES: argv not empty.
Result<ProgramResult> RunProgram(const std::vector<std::string>& argv, std::string_view input,
                                 bool merge_stderr = false);

}  // namespace dflow::tools
