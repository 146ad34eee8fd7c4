// Graph: the plain data a user builds. Nodes have a unique name, an op, typed attributes, data
// inputs "node:output", control inputs, a requested device and a colocation group. Building does
// no computation. Validate() checks the graph against the op registry and infers every output's
// dtype and shape.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/attr_value.h"
#include "graph/huge_page_allocator.h"
#include "graph/name_index.h"
#include "graph/op_registry.h"
#include "graph/status.h"

namespace dflow {

// A data input as written: the producing node's name and its output index.
struct InputRef {
  std::string node;
  int index = 0;
  bool operator==(const InputRef&) const = default;
};
// Parses "name:3" or "name" (output 0). InvalidArgument on a malformed reference.
Result<InputRef> ParseInputRef(std::string_view ref);

// A node as given by a user or a file, before it joins a graph.
struct NodeDef {
  std::string name;
  std::string op;
  std::vector<InputRef> inputs;
  std::vector<std::string> control_inputs;  // node names
  AttrMap attrs;
  std::string device;            // requested device spec, may be partial; empty: any
  std::string colocation_group;  // empty: none
};

// An edge end resolved to node ids.
struct Endpoint {
  int node = -1;
  int index = 0;
  bool operator==(const Endpoint&) const = default;
};

class Node {
 public:
  int id() const { return id_; }
  const std::string& name() const { return def_.name; }
  const std::string& op() const { return def_.op; }
  const NodeDef& def() const { return def_; }
  const AttrMap& attrs() const { return def_.attrs; }
  const std::string& requested_device() const { return def_.device; }
  const std::string& colocation_group() const { return def_.colocation_group; }
  int num_inputs() const { return static_cast<int>(def_.inputs.size()); }

  // Filled by Graph::Validate (or by the builder as each node is added).
  const OpDef* op_def() const { return op_def_; }
  // Its op's role (OpRole::kCompute before validation).
  OpRole role() const { return op_def_ != nullptr ? op_def_->role : OpRole::kCompute; }
  const std::vector<Endpoint>& inputs() const { return inputs_; }
  const std::vector<int>& control_inputs() const { return control_inputs_; }
  int num_outputs() const { return static_cast<int>(output_dtypes_.size()); }
  DType output_dtype(int i) const { return output_dtypes_[i]; }
  const Shape& output_shape(int i) const { return output_shapes_[i]; }
  const std::vector<DType>& output_dtypes() const { return output_dtypes_; }
  const std::vector<Shape>& output_shapes() const { return output_shapes_; }

  const AttrValue* FindAttr(std::string_view attr) const;
  // The attribute as T; InvalidArgument naming the node when missing or of another type.
  template <typename T>
  Result<T> GetAttr(std::string_view attr) const;

 private:
  friend class Graph;
  int id_ = -1;
  bool inferred_ = false;  // op and outputs copied from a validated node: not checked again
  NodeDef def_;
  const OpDef* op_def_ = nullptr;
  std::vector<Endpoint> inputs_;
  std::vector<int> control_inputs_;
  std::vector<DType> output_dtypes_;
  std::vector<Shape> output_shapes_;
};

class Graph {
 public:
  explicit Graph(const OpRegistry* registry = &OpRegistry::Global()) : registry_(registry) {}

  // Room for n nodes without reallocating (for code that builds large graphs).
  void Reserve(int n) {
    nodes_.reserve(n);
    by_name_.Reserve(n);
  }
  // Adds a node. InvalidArgument when the name is empty or already used. Inputs may name nodes
  // not yet added; Validate resolves them.
  Result<int> AddNode(NodeDef def);
  // Adds a node whose inputs all exist and checks it at once (op, arity, dtypes, attributes,
  // shapes), so a builder error names the node as it is added. On error the graph is unchanged.
  Result<int> AddNodeChecked(NodeDef def);
  // Adds a node of another, validated graph under definition `def` (its inputs renamed, its
  // device set; same op and attributes), keeping what validation inferred for `node` (op,
  // output dtypes and shapes): Validate() resolves its inputs and orders it but does not check
  // it again. For stages that rearrange a validated graph (the partitioner). REQUIRES: `node`
  // is validated and `def` has its op, attributes and input dtypes.
  Result<int> AddValidatedCopy(const Node& node, NodeDef def);
  // Adds control input `from` to node `to`.
  Status AddControlInput(int to, std::string_view from);
  // Sets the colocation group of a node (builder use).
  void SetColocationGroup(int node, std::string group);

  // Checks the whole graph: known ops, arity, resolvable inputs, attributes, no cycle, dtypes;
  // infers output shapes. Each error is InvalidArgument naming the node(s).
  Status Validate();
  bool validated() const { return validated_; }

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const Node& node(int id) const { return nodes_[id]; }
  std::optional<int> FindNode(std::string_view name) const;
  // Node ids, producers before consumers (data and control edges). REQUIRES: validated().
  const std::vector<int>& topological_order() const { return topo_order_; }
  // For each node, the (consumer, input slot) pairs of its data outputs; control consumers
  // carry slot -1. REQUIRES: validated().
  std::vector<std::vector<std::pair<int, int>>> Consumers() const;

  const OpRegistry& registry() const { return *registry_; }

 private:
  // Resolves inputs, checks op, arity, attrs and dtypes, runs the shape function.
  Status CheckNode(Node& node, bool resolved = false);
  Status ResolveInputs(Node& node);
  Status FindCycle() const;

  const OpRegistry* registry_;
  std::vector<Node, HugePageAllocator<Node>> nodes_;  // large graphs fill it at 2 MiB a fault
  NameIndex by_name_;
  std::string_view NameOf(int id) const { return nodes_[id].name(); }
  std::vector<int> topo_order_;
  bool validated_ = false;
};

}  // namespace dflow
