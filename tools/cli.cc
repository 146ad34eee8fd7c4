#include "tools/cli.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <string>

#include "dflow/version.h"

namespace dflow::tools {

void Configure(CLI::App& app, std::string_view program) {
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", fmt::format("{} {}", program, DFLOW_VERSION_STRING));
}

std::optional<int> Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "error: InvalidArgument: %s (see --help)\n", e.what());
    return kUsageError;
  }
  return std::nullopt;
}

CLI::Validator AtLeast(int64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        auto [ptr, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range) return "'" + text + "' is too large";
        if (error != std::errc() || ptr != end) return "'" + text + "' is not a whole number";
        if (value < min) return fmt::format("must be at least {}, not {}", min, text);
        return {};
      },
      min == 0   ? "NONNEGATIVE"
      : min == 1 ? "POSITIVE"
                 : fmt::format("AT LEAST {}", min));
}

namespace {

CLI::Validator NumberAbove(double bound, bool inclusive, std::string description) {
  return CLI::Validator(
      [bound, inclusive](std::string& text) -> std::string {
        double value = 0;
        try {
          size_t used = 0;
          value = std::stod(text, &used);
          if (used != text.size()) return "'" + text + "' is not a number";
        } catch (const std::exception&) {
          return "'" + text + "' is not a number";
        }
        if (value != value) return "'" + text + "' is not a number";
        if (inclusive ? value < bound : value <= bound) {
          return fmt::format("must be {} {:g}, not {}", inclusive ? "at least" : "greater than",
                             bound, text);
        }
        return {};
      },
      std::move(description));
}

}  // namespace

CLI::Validator Positive() { return NumberAbove(0, false, "POSITIVE"); }
CLI::Validator NonNegative() { return NumberAbove(0, true, "NONNEGATIVE"); }

}  // namespace dflow::tools
