#include "runtime/checkpoint_check.h"

#include <variant>

namespace dflow {

const Node* MirroredVariable(const Graph& graph, const Node& node) {
  auto attr = node.attrs().find("mirror_of");
  if (attr == node.attrs().end()) return nullptr;
  const auto* name = std::get_if<std::string>(&attr->second);
  if (name == nullptr || name->empty() || *name == node.name()) return nullptr;
  auto id = graph.FindNode(*name);
  if (!id) return nullptr;
  const Node& original = graph.node(*id);
  if (original.role() != OpRole::kVariable || original.output_dtype(0) != node.output_dtype(0) ||
      original.output_shape(0) != node.output_shape(0)) {
    return nullptr;
  }
  return &original;
}

const Tensor* RestoredValue(const Graph& graph, const Node& node,
                            const std::map<std::string, Tensor>& values) {
  auto it = values.find(node.name());
  if (it != values.end()) return &it->second;
  const Node* original = MirroredVariable(graph, node);
  if (original == nullptr) return nullptr;
  it = values.find(original->name());
  return it == values.end() ? nullptr : &it->second;
}

Status CheckRestorable(const Graph& graph, const std::map<std::string, Tensor>& values,
                       const std::string& path) {
  int variables = 0;
  for (int v = 0; v < graph.num_nodes(); ++v) {
    if (graph.node(v).role() == OpRole::kVariable) ++variables;
  }
  // A graph without variables shares none with a checkpoint that has some: the wrong file or the
  // wrong graph, not a restore that did its work.
  if (variables == 0 && !values.empty()) {
    std::string names;
    int listed = 0;
    for (const auto& [name, value] : values) {
      if (listed++ == 5) {
        names += ", ...";
        break;
      }
      names += (names.empty() ? "'" : ", '") + name + "'";
    }
    return FailedPrecondition(
        "checkpoint '{}' shares no variable with the graph: the file holds {} ({}), the graph "
        "has no variables to restore",
        path, values.size(), names);
  }
  for (int v = 0; v < graph.num_nodes(); ++v) {
    const Node& node = graph.node(v);
    if (node.role() != OpRole::kVariable) continue;
    const Tensor* value = RestoredValue(graph, node, values);
    if (value == nullptr) {
      const Node* original = MirroredVariable(graph, node);
      if (original != nullptr) {
        return NotFound("checkpoint '{}' has no variable '{}', nor '{}' which it mirrors", path,
                        node.name(), original->name());
      }
      return NotFound("checkpoint '{}' has no variable '{}'", path, node.name());
    }
    const Tensor& t = *value;
    if (t.dtype() != node.output_dtype(0) || !node.output_shape(0).IsCompatibleWith(t.shape())) {
      return InvalidArgument(
          "checkpoint '{}': variable '{}' is {}{} in the file but {}{} in the graph", path,
          node.name(), DTypeName(t.dtype()), t.shape(), DTypeName(node.output_dtype(0)),
          node.output_shape(0));
    }
  }
  return Status::OK();
}

}  // namespace dflow
