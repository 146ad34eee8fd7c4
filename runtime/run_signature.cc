#include "runtime/run_signature.h"

#include <algorithm>

namespace dflow {

std::string SignatureKey(const Feeds& feeds, const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets) {
  // Each name length-prefixed, so no two signatures share a key whatever their names hold.
  std::string key;
  auto add = [&key](const std::string& name) {
    key.append(std::to_string(name.size())).push_back(':');
    key.append(name);
  };
  for (const auto& [name, value] : feeds) add(name);
  key.push_back('|');
  for (const auto& f : fetches) add(f);
  key.push_back('|');
  for (const auto& t : targets) add(t);
  return key;
}

Result<int> CheckFeed(const Graph& graph, const std::string& name, const Tensor& value) {
  ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(name));
  auto id = graph.FindNode(ref.node);
  if (!id) return NotFound("feed '{}': no node named '{}'", name, ref.node);
  const Node& n = graph.node(*id);
  if (n.role() != OpRole::kPlaceholder) {
    return InvalidArgument(
        "feed '{}': node '{}' is a {}, not a Placeholder; only placeholders can be fed", name,
        n.name(), n.op());
  }
  if (ref.index != 0) return InvalidArgument("feed '{}': a placeholder has only output 0", name);
  if (!value.valid()) return InvalidArgument("feed '{}': the tensor is empty", name);
  if (value.dtype() != n.output_dtype(0)) {
    return InvalidArgument("feed '{}': placeholder '{}' is {}, the fed tensor is {}", name,
                           n.name(), n.output_dtype(0), value.dtype());
  }
  if (!n.output_shape(0).IsCompatibleWith(value.shape())) {
    return InvalidArgument("feed '{}': placeholder '{}' has shape {}, the fed tensor has shape {}",
                           name, n.name(), n.output_shape(0), value.shape());
  }
  if (!value.host_accessible()) {
    return InvalidArgument("feed '{}': the tensor is in {} memory, not host memory", name,
                           value.device());
  }
  return *id;
}

Result<std::vector<int>> CheckRun(const Graph& graph, const Feeds& feeds,
                                  const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets) {
  if (fetches.empty() && targets.empty()) {
    return InvalidArgument("Run needs at least one fetch or target");
  }
  std::vector<int> fed;
  fed.reserve(feeds.size());
  for (const auto& [name, value] : feeds) {
    ASSIGN_OR_RETURN(int node, CheckFeed(graph, name, value));
    if (std::find(fed.begin(), fed.end(), node) != fed.end()) {
      return InvalidArgument("feed '{}': placeholder fed twice", name);
    }
    fed.push_back(node);
  }
  return fed;
}

Result<PlanSpec> ResolveRun(const Graph& graph, const Feeds& feeds,
                            const std::vector<std::string>& fetches,
                            const std::vector<std::string>& targets, bool plan_memory) {
  PlanSpec spec;
  for (const auto& [name, value] : feeds) {
    ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(name));
    auto id = graph.FindNode(ref.node);
    if (!id) return NotFound("feed '{}': no node named '{}'", name, ref.node);
    spec.feeds.push_back(*id);
  }
  for (const auto& f : fetches) {
    ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(f));
    auto id = graph.FindNode(ref.node);
    if (!id) return NotFound("fetch '{}': no node named '{}'", f, ref.node);
    const Node& n = graph.node(*id);
    if (ref.index >= n.num_outputs()) {
      return InvalidArgument("fetch '{}': node '{}' ({}) has {} output{}", f, n.name(), n.op(),
                             n.num_outputs(), n.num_outputs() == 1 ? "" : "s");
    }
    spec.fetches.push_back({*id, ref.index});
  }
  for (const auto& t : targets) {
    auto id = graph.FindNode(t);
    if (!id) return NotFound("target '{}': no node named '{}'", t, t);
    spec.targets.push_back(*id);
  }
  spec.plan_memory = plan_memory;
  return spec;
}

}  // namespace dflow
