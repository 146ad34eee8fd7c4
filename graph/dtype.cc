#include "graph/dtype.h"

#include <array>

namespace dflow {
namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int size;
};
constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
    {DType::kInvalid, "invalid", 0},
    {DType::kF32, "f32", 4},
    {DType::kF64, "f64", 8},
    {DType::kF16, "f16", 2},
    {DType::kBF16, "bf16", 2},
    {DType::kI32, "i32", 4},
    {DType::kI64, "i64", 8},
    {DType::kU8, "u8", 1},
    {DType::kBool, "bool", 1},
}};
const DTypeInfo& Info(DType d) {
  auto i = static_cast<size_t>(d);
  return i < kInfo.size() ? kInfo[i] : kInfo[0];
}
}  // namespace

int DTypeSize(DType dtype) { return Info(dtype).size; }
std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

Result<DType> ParseDType(std::string_view name) {
  for (const auto& info : kInfo) {
    if (info.dtype != DType::kInvalid && info.name == name) return info.dtype;
  }
  return InvalidArgument("unknown dtype '{}' (expected f32, f64, f16, bf16, i32, i64, u8 or bool)",
                         name);
}

bool IsFloatingPoint(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kF16 || d == DType::kBF16;
}
bool IsInteger(DType d) { return d == DType::kI32 || d == DType::kI64 || d == DType::kU8; }

}  // namespace dflow
