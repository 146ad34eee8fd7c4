#include "graph/shape.h"

#include <algorithm>

namespace dflow {

Shape::Shape(std::initializer_list<int64_t> dims)
    : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  DFLOW_CHECK(dims.size() <= static_cast<size_t>(kMaxRank));
  rank_ = static_cast<int>(dims.size());
  for (int i = 0; i < rank_; ++i) {
    DFLOW_CHECK(dims[i] >= kUnknownDim);
    dims_[i] = dims[i];
  }
}

Result<Shape> Shape::Make(std::span<const int64_t> dims) {
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    return InvalidArgument("rank {} exceeds the maximum rank {}", dims.size(), kMaxRank);
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < kUnknownDim) {
      return InvalidArgument("dimension {} is {}; dimensions are >= 0, or -1 for unknown", i,
                             dims[i]);
    }
  }
  return Shape(dims);
}

Shape Shape::Unknown() {
  Shape s;
  s.rank_ = -1;
  return s;
}

bool Shape::fully_defined() const {
  if (rank_ < 0) return false;
  return std::none_of(dims_.begin(), dims_.begin() + rank_, [](int64_t d) { return d < 0; });
}

int64_t Shape::num_elements() const {
  if (!fully_defined()) return -1;
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::IsCompatibleWith(const Shape& concrete) const {
  if (unknown_rank() || concrete.unknown_rank()) return true;
  if (rank_ != concrete.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] >= 0 && concrete.dims_[i] >= 0 && dims_[i] != concrete.dims_[i]) return false;
  }
  return true;
}

std::string Shape::ToString() const {
  if (rank_ < 0) return "<unknown>";
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ",";
    s += dims_[i] < 0 ? std::string("?") : std::to_string(dims_[i]);
  }
  return s + "]";
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  return std::equal(dims_.begin(), dims_.begin() + std::max(rank_, 0), o.dims_.begin());
}

}  // namespace dflow
