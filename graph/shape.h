// Shape: the dimensions of a tensor. A dimension of -1 is unknown (known only at run time);
// a shape of unknown rank is Shape::Unknown(). Dimensions are stored inline (no allocation),
// up to kMaxRank of them.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "graph/status.h"

namespace dflow {

class Shape {
 public:
  static constexpr int kMaxRank = 8;
  static constexpr int64_t kUnknownDim = -1;

  Shape() = default;  // a scalar: rank 0
  // REQUIRES: dims.size() <= kMaxRank; every dim >= -1. Use Make() for unchecked input.
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  // Checks rank and dimensions; the error names what is wrong.
  static Result<Shape> Make(std::span<const int64_t> dims);
  static Shape Unknown();

  bool unknown_rank() const { return rank_ < 0; }
  // -1 for unknown rank.
  int rank() const { return rank_; }
  int64_t dim(int i) const { return dims_[i]; }
  int64_t operator[](int i) const { return dims_[i]; }
  void set_dim(int i, int64_t d) { dims_[i] = d; }
  std::span<const int64_t> dims() const {
    return {dims_.data(), static_cast<size_t>(rank_ < 0 ? 0 : rank_)};
  }
  std::vector<int64_t> dim_vector() const { return {dims().begin(), dims().end()}; }

  // Known rank and every dimension known.
  bool fully_defined() const;
  // Product of the dimensions; -1 when not fully defined. 1 for a scalar.
  int64_t num_elements() const;
  // True when a tensor of shape `concrete` may stand where this shape is expected.
  bool IsCompatibleWith(const Shape& concrete) const;

  // "[2,3]", "[?,3]", "[]" for a scalar, "<unknown>" for unknown rank.
  std::string ToString() const;

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  int rank_ = 0;
  std::array<int64_t, kMaxRank> dims_{};
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.ToString(); }

}  // namespace dflow

template <>
struct fmt::formatter<dflow::Shape> : fmt::formatter<std::string> {
  auto format(const dflow::Shape& s, format_context& ctx) const {
    return fmt::formatter<std::string>::format(s.ToString(), ctx);
  }
};
