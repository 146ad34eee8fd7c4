// AttrValue: a typed node attribute (int, float, bool, string, dtype, shape, tensor, or a list
// of one of them).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "graph/dtype.h"
#include "graph/shape.h"
#include "graph/tensor.h"

namespace dflow {

using AttrValue =
    std::variant<int64_t, double, bool, std::string, DType, Shape, Tensor, std::vector<int64_t>,
                 std::vector<double>, std::vector<bool>, std::vector<std::string>,
                 std::vector<DType>, std::vector<Shape>, std::vector<Tensor>>;

// The alternatives of AttrValue, in the same order.
enum class AttrType : uint8_t {
  kInt,
  kFloat,
  kBool,
  kString,
  kDType,
  kShape,
  kTensor,
  kIntList,
  kFloatList,
  kBoolList,
  kStringList,
  kDTypeList,
  kShapeList,
  kTensorList,
};
static_assert(std::variant_size_v<AttrValue> == static_cast<size_t>(AttrType::kTensorList) + 1);

inline AttrType TypeOf(const AttrValue& v) { return static_cast<AttrType>(v.index()); }
// "int", "float", "bool", "string", "dtype", "shape", "tensor", "list(int)", ...
std::string_view AttrTypeName(AttrType type);
// A short readable form, for messages and tools: "3", "[1,2]", "f32", "f32[2,2] {...}".
std::string AttrValueString(const AttrValue& v);

// Ordered so that printing and serialising a node is deterministic.
using AttrMap = std::map<std::string, AttrValue, std::less<>>;

template <typename T>
constexpr AttrType AttrTypeOf() {
  return static_cast<AttrType>(AttrValue(T{}).index());
}

}  // namespace dflow
