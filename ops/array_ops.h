// Builder functions for the array ops: Placeholder, Const, Identity, NoOp, Reshape.
#pragma once

#include <vector>

#include "graph/scope.h"

namespace dflow::ops {

// A node with no outputs, such as NoOp: usable as a Session::Run target or control dependency.
struct Operation {
  Output node;  // refers to the node; its index is meaningless
  const std::string& name() const { return node.node_name(); }
  bool valid() const { return node.valid(); }
};

// A value fed at run time. `shape` may have -1 dimensions or be Shape::Unknown().
Output Placeholder(const Scope& scope, DType dtype, const Shape& shape = Shape::Unknown());
// A constant tensor, stored in the graph.
Output Const(const Scope& scope, const Tensor& value);
template <typename T>
Output Const(const Scope& scope, const std::vector<T>& values, const Shape& shape) {
  return Const(scope, Tensor::FromVector<T>(values, shape));
}
template <typename T>
Output Const(const Scope& scope, T scalar) {
  return Const(scope, Tensor::Scalar<T>(scalar));
}
Output Identity(const Scope& scope, Output x);
// Does nothing; groups control dependencies (scope.WithControlDependencies).
Operation NoOp(const Scope& scope);
// Tensors of x's shape and dtype filled with 0 or 1.
Output ZerosLike(const Scope& scope, Output x);
Output OnesLike(const Scope& scope, Output x);
// The number of x's elements along `axes` (all when empty; negative axes count from the end) as
// a scalar of x's dtype, read from x's shape at run time.
Output ElementCount(const Scope& scope, Output x, const std::vector<int64_t>& axes = {});
// A tensor of a fully defined shape filled with `value`.
Output Fill(const Scope& scope, const Shape& shape, double value, DType dtype = DType::kF32);
// A tensor of a fully defined shape whose contents are unspecified: for graphs that then write
// every element (WriteRows, manip_ops.h).
Output Empty(const Scope& scope, const Shape& shape, DType dtype = DType::kF32);
// The element-wise sum of one or more tensors of the same dtype and shape.
Output AddN(const Scope& scope, const std::vector<Output>& xs);
// Same data, new shape; at most one dimension -1 (inferred). Shares the input's buffer.
Output Reshape(const Scope& scope, Output x, const std::vector<int64_t>& shape);

}  // namespace dflow::ops
