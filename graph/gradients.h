// Reverse-mode automatic differentiation that builds the backward graph into the same graph.
//
//   auto grads = Gradients(root, loss, {w1, b1, w2});  // d loss / d w1, ...
//
// Walks the nodes on paths from the xs to y in reverse topological order, calls each op's
// gradient function (OpDef::grad_fn) and sums the gradients of a tensor used several times with
// AddN. Gradient nodes go in the name scope "gradients/" on the forward node's device.
#pragma once

#include <vector>

#include "graph/scope.h"

namespace dflow {

// What an op's gradient function sees: the forward node with its inputs and outputs, the
// gradients flowing into its outputs, and where to put the gradients of its inputs.
class GradContext {
 public:
  GradContext(const Scope& scope, const Node& node, std::vector<Output> grads,
              std::vector<bool> wanted);

  // The scope for the gradient nodes of this op.
  const Scope& scope() const { return scope_; }
  // The forward node. Adding nodes may move it: use the reference at once, do not keep it.
  const Node& node() const { return scope_.graph().node(node_id_); }
  int num_inputs() const { return static_cast<int>(input_grads_.size()); }
  Output input(int i) const;
  Output output(int i) const;
  // The gradient of y with respect to output i; invalid when none flows there (zero).
  Output grad(int i) const { return grads_[i]; }
  // Whether input i leads to a requested x: gradient functions may skip the others.
  bool wanted(int i) const { return wanted_[i]; }
  void set_input_grad(int i, Output g) { input_grads_[i] = g; }
  const std::vector<Output>& input_grads() const { return input_grads_; }

 private:
  Scope scope_;
  int node_id_;
  std::vector<Output> grads_;
  std::vector<bool> wanted_;
  std::vector<Output> input_grads_;
};

// Adds nodes computing d y / d x for each x (of y's dtype; y is usually a scalar loss). With
// `grad_y` valid, computes the vector-Jacobian product with it instead of d y / d x for y summed.
// Errors, also recorded in the scope: InvalidArgument naming the op when a path from an x to y
// goes through an op without a gradient, and naming x when no gradient reaches it.
Result<std::vector<Output>> Gradients(const Scope& scope, Output y, const std::vector<Output>& xs,
                                      Output grad_y = Output());

}  // namespace dflow
