// Scope: the builder API's context. A scope holds the graph being built, a name prefix, a
// requested device, a colocation group and control dependencies, and keeps the first error:
// once an op call fails, later calls on any scope of the same graph do nothing and return an
// invalid Output, so op calls chain and the error is checked once, at the end.
//
//   Scope root = Scope::NewRootScope();
//   auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
//   auto h = ops::Relu(root.WithNameScope("layer1"), ops::MatMul(root, x, w));
//   if (!root.ok()) return root.status();
//
// Shape inference runs as each node is added, so a shape error names the node at build time.
// Scopes are cheap to copy; all copies share one graph and one status. Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"

namespace dflow {

// One output of a node in a builder graph. Default-built or returned after an error: invalid.
class Output {
 public:
  Output() = default;
  Output(const Graph* graph, int node, int index) : graph_(graph), node_(node), index_(index) {}

  bool valid() const { return graph_ != nullptr; }
  int node_id() const { return node_; }
  int index() const { return index_; }
  const Node& node() const { return graph_->node(node_); }
  const std::string& node_name() const { return node().name(); }
  // "name:index", the form Session::Run takes for fetches.
  std::string name() const { return node_name() + ":" + std::to_string(index_); }
  // kInvalid and an unknown shape for an invalid output (so code that builds on after an error,
  // which the scope records, reads no freed or null node).
  DType dtype() const { return valid() ? node().output_dtype(index_) : DType::kInvalid; }
  const Shape& shape() const {
    static const Shape unknown = Shape::Unknown();
    return valid() ? node().output_shape(index_) : unknown;
  }

 private:
  const Graph* graph_ = nullptr;
  int node_ = -1;
  int index_ = 0;
};

class Scope {
 public:
  // A scope on a new, empty graph, using the global op registry.
  static Scope NewRootScope();
  // A root scope that goes on building a copy of `graph` (an imported model, a graph loaded
  // from a file): its nodes keep their names (new ones avoid them), and OutputOf(id) of a node
  // found with graph().FindNode gives an input for the nodes added.
  static Scope ExtendGraph(Graph graph);

  // Copies of this scope with one setting changed.
  Scope WithDevice(const std::string& device) const;   // "cpu:1", "/job:w/task:0/device:GPU:0"
  Scope WithNameScope(const std::string& name) const;  // prefixes node names with "name/"
  Scope WithOpName(const std::string& name) const;     // exact name of the next node
  Scope WithColocation(const Output& output) const;    // same device as output's node
  Scope WithControlDependencies(const std::vector<Output>& deps) const;

  // "a/b/" inside WithNameScope("a").WithNameScope("b"); empty at the root.
  const std::string& name_prefix() const { return name_prefix_; }

  bool ok() const { return state_->status.ok(); }
  const Status& status() const { return state_->status; }
  // Records `s` if it is the first error.
  void UpdateStatus(const Status& s) const;

  const Graph& graph() const { return *state_->graph; }
  std::shared_ptr<Graph> graph_ptr() const { return state_->graph; }

  // For op functions: adds a node of `op` with the scope's name, device, colocation and
  // control dependencies; returns its id, or -1 after recording an error.
  int AddNode(const std::string& op, const std::vector<Output>& inputs, AttrMap attrs) const;
  // Output `index` of node `id`, invalid when id is -1.
  Output OutputOf(int id, int index = 0) const;
  // The output "NODE:INDEX" (or "NODE", output 0) names in the graph: NotFound naming it when
  // there is no such node or output. For building on a graph made elsewhere (ExtendGraph).
  Result<Output> FindOutput(std::string_view tensor) const;
  // True when every output is valid and belongs to this scope's graph (records an error if not).
  bool CheckInputs(const std::string& op, const std::vector<Output>& inputs) const;

 private:
  struct State {
    std::shared_ptr<Graph> graph;
    Status status;
    std::unordered_map<std::string, int> name_counts;
  };
  explicit Scope(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::string UniqueName(const std::string& op) const;

  std::shared_ptr<State> state_;
  std::string name_prefix_;
  std::string op_name_;
  std::string device_;
  std::string colocation_;
  std::vector<std::string> control_deps_;
};

}  // namespace dflow
