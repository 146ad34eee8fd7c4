#include "rewrite/split_variables.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <set>

#include "graph/scope.h"
#include "ops/array_ops.h"
#include "ops/manip_ops.h"
#include "ops/state_ops.h"

namespace dflow::ops {
namespace {

class Splitter {
 public:
  Splitter(const Graph& g, int64_t max_bytes) : g_(g), max_bytes_(max_bytes) {}

  Result<SplitVariables> Run() {
    Plan();
    out_.resize(g_.num_nodes());
    added_.resize(g_.num_nodes());
    for (int id : g_.topological_order()) RETURN_IF_ERROR(Copy(id));
    RETURN_IF_ERROR(root_.status());
    SplitVariables result;
    result.graph = root_.graph();
    RETURN_IF_ERROR(result.graph.Validate().WithPrefix("SplitVariablesIntoRowBlocks: "));
    for (const auto& [id, parts] : parts_) {
      if (g_.node(id).output_shape(0) == group_shape_.at(group_of_.at(id))) {
        result.blocks[g_.node(id).name()] = static_cast<int>(parts.size());
        result.whole_reads.push_back(g_.node(id).name());
      }
    }
    return result;
  }

 private:
  // Chooses the groups to split and their rows per block.
  void Plan() {
    group_of_ = VariableGroups(g_);
    std::map<int, std::vector<int>> members;
    for (const auto& [var, root] : group_of_) members[root].push_back(var);
    std::set<int> unsplittable;
    for (int id = 0; id < g_.num_nodes(); ++id) {
      const Node& node = g_.node(id);
      if (node.op_def() == nullptr || !node.op_def()->stateful || node.role() == OpRole::kVariable)
        continue;
      for (const Endpoint& in : node.inputs()) {
        if (g_.node(in.node).role() == OpRole::kVariable && !node.op_def()->row_wise_update) {
          unsplittable.insert(group_of_.at(in.node));
        }
      }
    }
    for (const auto& [root, vars] : members) {
      if (unsplittable.count(root)) continue;
      int64_t bytes = 0;
      Shape largest;
      int64_t most = -1;
      for (int v : vars) {
        const Node& var = g_.node(v);
        const int64_t n = var.output_shape(0).num_elements();
        bytes += n * DTypeSize(var.output_dtype(0));
        if (n > most) {
          most = n;
          largest = var.output_shape(0);
        }
      }
      if (bytes <= max_bytes_ || largest.rank() < 1 || largest.dims()[0] < 2) continue;
      bool uniform = true;
      for (int v : vars) {
        const Shape& s = g_.node(v).output_shape(0);
        uniform = uniform && (s == largest || s.num_elements() == 1);
      }
      if (!uniform) continue;
      const int64_t rows = largest.dims()[0];
      const int64_t k = std::min<int64_t>((bytes + max_bytes_ - 1) / max_bytes_, rows);
      std::vector<int64_t> sizes;
      for (int64_t b = 0; b < k; ++b) sizes.push_back(rows / k + (b < rows % k ? 1 : 0));
      rows_[root] = sizes;
      group_shape_[root] = largest;
    }
  }

  // The split group a node belongs to: a Variable's own, or the first split Variable a
  // stateful node reads; -1 when none.
  int SplitGroup(int id) const {
    const Node& node = g_.node(id);
    if (node.role() == OpRole::kVariable) {
      auto it = group_of_.find(id);
      return it != group_of_.end() && rows_.count(it->second) ? it->second : -1;
    }
    if (node.op_def() == nullptr || !node.op_def()->stateful) return -1;
    for (const Endpoint& in : node.inputs()) {
      if (g_.node(in.node).role() == OpRole::kVariable) {
        const int group = SplitGroup(in.node);
        if (group >= 0) return group;
      }
    }
    return -1;
  }

  std::vector<Output> Control(const Node& node) const {
    std::vector<Output> control;
    for (int c : node.control_inputs()) {
      for (int added : added_[c]) control.push_back(root_.OutputOf(added));
    }
    return control;
  }

  Scope ScopeFor(const Node& node, const std::string& name) const {
    Scope s = root_.WithOpName(name).WithDevice(node.requested_device());
    std::vector<Output> control = Control(node);
    return control.empty() ? s : s.WithControlDependencies(control);
  }

  void SetGroup(int copy, const Node& node, const std::string& suffix) {
    if (node.colocation_group().empty()) return;
    root_.graph_ptr()->SetColocationGroup(copy, node.colocation_group() + suffix);
  }

  // Block b of `in` (the value of an input with the group's shape).
  Output Band(const Endpoint& in, int group, size_t b) {
    auto [it, fresh] = bands_.try_emplace({in.node, in.index});
    if (fresh) {
      const Output whole = out_[in.node][in.index];
      it->second = SplitV(
          root_.WithOpName(fmt::format("{}_{}/row_blocks", g_.node(in.node).name(), in.index)),
          whole, rows_.at(group), 0);
    }
    return b < it->second.size() ? it->second[b] : Output();
  }

  Status Copy(int id) {
    const Node& node = g_.node(id);
    const int group = SplitGroup(id);
    if (group < 0) {
      std::vector<Output> inputs;
      for (const Endpoint& in : node.inputs()) inputs.push_back(out_[in.node][in.index]);
      const int copy = ScopeFor(node, node.name()).AddNode(node.op(), inputs, node.attrs());
      RETURN_IF_ERROR(root_.status());
      SetGroup(copy, node, "");
      Keep(id, {copy}, copy);
      return Status::OK();
    }
    const std::vector<int64_t>& rows = rows_.at(group);
    const Shape& shape = group_shape_.at(group);
    std::vector<int> copies;
    for (size_t b = 0; b < rows.size(); ++b) {
      const std::string name = fmt::format("{}/part{}", node.name(), b);
      int copy = -1;
      if (node.role() == OpRole::kVariable) {
        Shape part = node.output_shape(0);
        if (part == shape) {
          std::vector<int64_t> dims = part.dim_vector();
          dims[0] = rows[b];
          part = Shape(dims);
        }
        copy = Variable(ScopeFor(node, name), part, node.output_dtype(0)).node_id();
        parts_[id].push_back(copy);
      } else {
        std::vector<Output> inputs;
        for (const Endpoint& in : node.inputs()) {
          auto parts = parts_.find(in.node);
          if (parts != parts_.end()) {
            inputs.push_back(root_.OutputOf(parts->second[b]));
          } else if (g_.node(in.node).output_shape(in.index) == shape) {
            inputs.push_back(Band(in, group, b));
          } else {
            inputs.push_back(out_[in.node][in.index]);
          }
        }
        copy = ScopeFor(node, name).AddNode(node.op(), inputs, node.attrs());
      }
      RETURN_IF_ERROR(root_.status());
      SetGroup(copy, node, fmt::format("/part{}", b));
      copies.push_back(copy);
    }
    // What readers see, under the node's own name (so it can still be fetched or run): the
    // whole value where the output has the group's shape (the blocks' rows end to end), the
    // first block's otherwise (a scalar copied into each), after every block's.
    std::vector<Output> outs;
    for (int k = 0; k < node.num_outputs(); ++k) {
      const std::string name = k == 0 ? node.name() : fmt::format("{}_{}/whole", node.name(), k);
      if (node.output_shape(k) == shape) {
        std::vector<Output> bands;
        for (int c : copies) bands.push_back(root_.OutputOf(c, k));
        outs.push_back(Concat(root_.WithOpName(name), bands, 0));
      } else {
        std::vector<Output> after;
        for (size_t c = 1; c < copies.size(); ++c) after.push_back(root_.OutputOf(copies[c]));
        outs.push_back(Identity(root_.WithOpName(name).WithControlDependencies(after),
                                root_.OutputOf(copies[0], k)));
      }
    }
    if (outs.empty()) {  // a node without outputs: a NoOp after every block's stands for it
      std::vector<Output> after;
      for (int c : copies) after.push_back(root_.OutputOf(c));
      NoOp(root_.WithOpName(node.name()).WithControlDependencies(after));
    }
    RETURN_IF_ERROR(root_.status());
    out_[id] = std::move(outs);
    added_[id] = copies;
    return Status::OK();
  }

  void Keep(int id, std::vector<int> added, int node) {
    std::vector<Output> outs;
    for (int k = 0; k < g_.node(id).num_outputs(); ++k) outs.push_back(root_.OutputOf(node, k));
    out_[id] = std::move(outs);
    added_[id] = std::move(added);
  }

  const Graph& g_;
  const int64_t max_bytes_;
  Scope root_ = Scope::NewRootScope();
  std::map<int, int> group_of_;               // variable -> group
  std::map<int, std::vector<int64_t>> rows_;  // split group -> rows per block
  std::map<int, Shape> group_shape_;          // split group -> its largest variable's shape
  std::map<int, std::vector<int>> parts_;     // split variable -> its blocks' node ids
  std::vector<std::vector<Output>> out_;      // node -> what its readers take
  std::vector<std::vector<int>> added_;       // node -> its copies (control inputs)
  std::map<std::pair<int, int>, std::vector<Output>> bands_;  // an input's blocks
};

}  // namespace

std::map<int, int> VariableGroups(const Graph& graph) {
  std::map<int, int> parent;
  std::function<int(int)> find = [&](int v) {
    auto it = parent.find(v);
    if (it == parent.end() || it->second == v) return v;
    return it->second = find(it->second);
  };
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    if (node.role() == OpRole::kVariable) parent.try_emplace(id, id);
    if (node.op_def() == nullptr || !node.op_def()->stateful) continue;
    int first = -1;
    for (const Endpoint& in : node.inputs()) {
      if (graph.node(in.node).role() != OpRole::kVariable) continue;
      if (first < 0) {
        first = find(in.node);
      } else {
        parent[find(in.node)] = first;
      }
    }
  }
  std::map<int, int> groups;
  for (const auto& [var, unused] : parent) groups[var] = find(var);
  return groups;
}

Result<SplitVariables> SplitVariablesIntoRowBlocks(const Graph& graph, int64_t max_bytes) {
  if (max_bytes <= 0) {
    return InvalidArgument("SplitVariablesIntoRowBlocks: max_bytes must be positive ({} given)",
                           max_bytes);
  }
  return Splitter(graph, max_bytes).Run();
}

}  // namespace dflow::ops
