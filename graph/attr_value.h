// AttrValue: a typed node attribute (int, float, bool, string, dtype, shape, tensor, or a list
// of one of them).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
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

// A node's attributes by name: a vector kept sorted by name, so that printing and serialising a
// node is deterministic, and so that a node's few attributes take one allocation rather than
// one each (graphs of a million nodes are built, copied and partitioned). The interface is
// std::map's, but inserting invalidates iterators and references.
class AttrMap {
 public:
  using value_type = std::pair<std::string, AttrValue>;
  using iterator = std::vector<value_type>::iterator;
  using const_iterator = std::vector<value_type>::const_iterator;

  AttrMap() = default;
  // Later duplicates of a name are ignored, as std::map's constructor does.
  AttrMap(std::initializer_list<value_type> init) {
    items_.reserve(init.size());
    for (const auto& [name, value] : init) emplace(name, value);
  }

  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }

  iterator find(std::string_view name) {
    auto it = LowerBound(name);
    return it != items_.end() && it->first == name ? it : items_.end();
  }
  const_iterator find(std::string_view name) const {
    return const_cast<AttrMap*>(this)->find(name);
  }
  size_t count(std::string_view name) const { return find(name) != end() ? 1 : 0; }
  // Inserts (name, value) unless the name is present; returns the entry and whether it is new.
  template <typename V>
  std::pair<iterator, bool> emplace(std::string_view name, V&& value) {
    auto it = LowerBound(name);
    if (it != items_.end() && it->first == name) return {it, false};
    return {items_.emplace(it, std::string(name), AttrValue(std::forward<V>(value))), true};
  }
  // The value of `name`, inserted (as int 0) when absent.
  AttrValue& operator[](std::string_view name) { return emplace(name, int64_t{0}).first->second; }
  size_t erase(std::string_view name) {
    auto it = find(name);
    if (it == items_.end()) return 0;
    items_.erase(it);
    return 1;
  }
  void clear() { items_.clear(); }
  void reserve(size_t n) { items_.reserve(n); }
  bool operator==(const AttrMap&) const = default;

 private:
  iterator LowerBound(std::string_view name) {
    return std::lower_bound(items_.begin(), items_.end(), name,
                            [](const value_type& a, std::string_view b) { return a.first < b; });
  }
  std::vector<value_type> items_;
};

template <typename T>
constexpr AttrType AttrTypeOf() {
  return static_cast<AttrType>(AttrValue(T{}).index());
}

}  // namespace dflow
