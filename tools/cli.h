// One command-line vocabulary for dflow's tools and examples (CLI11):
//
//   CLI::App app("what it does");
//   tools::Configure(app, "dflow-run");  // --version, defaults shown in --help
//   app.add_option("--steps", steps, "...")->check(tools::AtLeast(1));
//   if (auto code = tools::Parse(app, argc, argv)) return *code;
//
// Usage errors exit 2 with one line "error: InvalidArgument: <what> (see --help)"; --help and
// --version exit 0; bounds are said in words ("must be at least 1"), not as the limits of a type.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dflow::tools {

// The exit status of a usage error (a bad flag or value), in every tool and example.
inline constexpr int kUsageError = 2;

// Call right after making `app`, before adding options: `--version` (printing "PROGRAM
// VERSION") and every option's default value shown in --help.
void Configure(CLI::App& app, std::string_view program);

// Parses the command line. nullopt: go on. Otherwise the program should exit with the value:
// 0 after --help or --version (printed), kUsageError after a usage error (printed to stderr as
// one line).
std::optional<int> Parse(CLI::App& app, int argc, char** argv);

// A whole number of at least `min`.
CLI::Validator AtLeast(int64_t min);
// A number greater than 0.
CLI::Validator Positive();
// A number of at least 0.
CLI::Validator NonNegative();

}  // namespace dflow::tools
