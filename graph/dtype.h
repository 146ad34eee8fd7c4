// DType: the element types a Tensor can hold.
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>

#include "graph/status.h"

namespace dflow {

enum class DType : uint8_t {
  kInvalid = 0,
  kF32,
  kF64,
  kF16,
  kBF16,
  kI32,
  kI64,
  kU8,
  kBool,
};
inline constexpr int kNumDTypes = 9;  // including kInvalid

// Bytes per element; 0 for kInvalid.
int DTypeSize(DType dtype);
// "f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"; "invalid" for kInvalid.
std::string_view DTypeName(DType dtype);
// Parses a name as printed by DTypeName.
Result<DType> ParseDType(std::string_view name);
bool IsFloatingPoint(DType dtype);
bool IsInteger(DType dtype);

// The DType of a C++ element type, for templates.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};

inline std::ostream& operator<<(std::ostream& os, DType d) { return os << DTypeName(d); }

}  // namespace dflow

template <>
struct fmt::formatter<dflow::DType> : fmt::formatter<std::string_view> {
  auto format(dflow::DType d, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(dflow::DTypeName(d), ctx);
  }
};
