// Sizes on the command line: "512MiB", "1.5GB", "1048576".
#pragma once

#include <cstdint>
#include <string_view>

#include "graph/status.h"

namespace dflow::tools {

// Bytes in `text`: a positive number (digits, optionally with a fraction: "1.5") and an
// optional unit, B, or the decimal kB/KB, MB, GB, TB (powers of 1000) or binary KiB, MiB, GiB,
// TiB (powers of 1024); no space, no sign. Units are case-insensitive except that "kb" and "KB"
// both mean 1000 bytes. A fraction is rounded down to whole bytes. InvalidArgument quoting the
// text and saying what is wrong: no number, an unknown unit, zero (or under one byte), a sign,
// more than 2^62 bytes.
Result<int64_t> ParseByteSize(std::string_view text);

}  // namespace dflow::tools
