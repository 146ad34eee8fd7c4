#include "tools/size_flag.h"

#include <cctype>
#include <cmath>
#include <string>
#include <utility>

namespace dflow::tools {

Result<int64_t> ParseByteSize(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("'{}' is not a size: {} (expected e.g. 512MiB, 1.5GB or 1048576)", text,
                           why);
  };
  size_t digits = 0, dots = 0, i = 0;
  for (; i < text.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++digits;
    } else if (text[i] == '.' && dots == 0) {
      ++dots;
    } else {
      break;
    }
  }
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) return bad("a size has no sign");
  if (digits == 0) return bad("it does not start with a number");
  if (digits > 24) return bad("it is over 2^62 bytes");
  std::string number(text.substr(0, i));
  std::string unit;
  for (char c : text.substr(i))
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::pair<const char*, double> kUnits[] = {{"", 1},
                                                          {"b", 1},
                                                          {"kb", 1e3},
                                                          {"mb", 1e6},
                                                          {"gb", 1e9},
                                                          {"tb", 1e12},
                                                          {"kib", 1024.0},
                                                          {"mib", 1048576.0},
                                                          {"gib", 1073741824.0},
                                                          {"tib", 1099511627776.0}};
  double scale = 0;
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) scale = factor;
  }
  if (scale == 0) {
    return bad(fmt::format("unknown unit '{}'; units are B, KB, MB, GB, TB, KiB, MiB, GiB and TiB",
                           text.substr(i)));
  }
  double bytes = std::floor(std::stod(number) * scale);
  if (bytes < 1) return bad("it must be at least one byte");
  if (bytes > std::ldexp(1.0, 62)) return bad("it is over 2^62 bytes");
  return static_cast<int64_t>(bytes);
}

}  // namespace dflow::tools
