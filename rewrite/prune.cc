#include "rewrite/prune.h"

namespace dflow {

Result<std::vector<bool>> NeededNodes(const Graph& graph, const PlanSpec& spec) {
  const int n = graph.num_nodes();
  std::vector<bool> fed(n, false), needed(n, false);
  for (int f : spec.feeds) fed[f] = true;
  std::vector<int> stack;
  auto need = [&](int id) {
    if (!needed[id]) {
      needed[id] = true;
      stack.push_back(id);
    }
  };
  for (const auto& e : spec.fetches) need(e.node);
  for (int t : spec.targets) need(t);
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    const Node& node = graph.node(id);
    if (node.role() == OpRole::kPlaceholder && !fed[id]) {
      return InvalidArgument("placeholder '{}' ({}{}) must be fed: a fetch or target needs it",
                             node.name(), node.output_dtype(0), node.output_shape(0));
    }
    for (const auto& e : node.inputs()) need(e.node);
    for (int c : node.control_inputs()) need(c);
  }
  for (int f : spec.feeds) need(f);  // a fed placeholder nobody reads still takes its value
  return needed;
}

}  // namespace dflow
