#include "tools/feed_dtype.h"

#include <limits>

namespace dflow::tools {
namespace {

// NumPy's name of a dtype, for the message saying how to save a file.
std::string_view NumpyName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32 ('<f4')";
    case DType::kF64:
      return "float64 ('<f8')";
    case DType::kF16:
      return "float16 ('<f2')";
    case DType::kI32:
      return "int32 ('<i4')";
    case DType::kI64:
      return "int64 ('<i8')";
    case DType::kU8:
      return "uint8 ('|u1')";
    case DType::kBool:
      return "bool ('|b1')";
    default:
      return "no NumPy dtype";
  }
}

// "[2,1]" for flat index 5 of shape [3,2].
std::string IndexIn(const Shape& shape, int64_t flat) {
  std::vector<int64_t> index(shape.rank());
  for (int i = shape.rank() - 1; i >= 0; --i) {
    index[i] = flat % shape[i];
    flat /= shape[i];
  }
  std::string s;
  for (int64_t i : index) s += (s.empty() ? "" : ",") + std::to_string(i);
  return fmt::format("[{}]", s);
}

}  // namespace

Result<Tensor> MatchPlaceholderDType(const Graph& graph, const std::string& feed,
                                     const std::string& file, Tensor value) {
  auto ref = ParseInputRef(feed);
  if (!ref.ok()) return value;
  auto id = graph.FindNode(ref->node);
  if (!id || graph.node(*id).role() != OpRole::kPlaceholder) return value;
  const Node& placeholder = graph.node(*id);
  DType want = placeholder.output_dtype(0);
  if (value.dtype() == want) return value;
  if (value.dtype() == DType::kI64 && want == DType::kI32) {
    Tensor converted(DType::kI32, value.shape());
    auto from = value.flat<int64_t>();
    auto to = converted.flat<int32_t>();
    for (size_t i = 0; i < from.size(); ++i) {
      if (from[i] < std::numeric_limits<int32_t>::min() ||
          from[i] > std::numeric_limits<int32_t>::max()) {
        return InvalidArgument(
            "--feed {}: {} holds int64 values for placeholder '{}' (i32); the value {} at index "
            "{} does not fit int32",
            feed, file, placeholder.name(), from[i], IndexIn(value.shape(), i));
      }
      to[i] = static_cast<int32_t>(from[i]);
    }
    return converted;
  }
  return InvalidArgument(
      "--feed {}: {} holds {} values, placeholder '{}' is {}: save the array as {} (dflow-run "
      "converts int64 to int32 only)",
      feed, file, DTypeName(value.dtype()), placeholder.name(), DTypeName(want), NumpyName(want));
}

}  // namespace dflow::tools
