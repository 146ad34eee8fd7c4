#include "graph/attr_value.h"

#include <type_traits>

namespace dflow {

std::string_view AttrTypeName(AttrType type) {
  switch (type) {
    case AttrType::kInt:
      return "int";
    case AttrType::kFloat:
      return "float";
    case AttrType::kBool:
      return "bool";
    case AttrType::kString:
      return "string";
    case AttrType::kDType:
      return "dtype";
    case AttrType::kShape:
      return "shape";
    case AttrType::kTensor:
      return "tensor";
    case AttrType::kIntList:
      return "list(int)";
    case AttrType::kFloatList:
      return "list(float)";
    case AttrType::kBoolList:
      return "list(bool)";
    case AttrType::kStringList:
      return "list(string)";
    case AttrType::kDTypeList:
      return "list(dtype)";
    case AttrType::kShapeList:
      return "list(shape)";
    case AttrType::kTensorList:
      return "list(tensor)";
  }
  return "?";
}

namespace {
template <typename T>
std::string One(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return "\"" + v + "\"";
  } else if constexpr (std::is_same_v<T, Tensor>) {
    return v.DebugString(4);
  } else if constexpr (std::is_same_v<T, Shape>) {
    return v.ToString();
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else {
    return fmt::format("{}", v);
  }
}
}  // namespace

std::string AttrValueString(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string>) {
          std::string s = "[";
          for (size_t i = 0; i < v.size(); ++i) {
            s += (i ? "," : "") + One<typename T::value_type>(v[i]);
          }
          return s + "]";
        } else {
          return One(v);
        }
      },
      value);
}

}  // namespace dflow
