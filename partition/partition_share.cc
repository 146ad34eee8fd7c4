#include "partition/partition_share.h"

namespace dflow {

PartitionShare ShareOf(const Graph& graph, const PlanSpec& spec, const Graph& part) {
  PartitionShare share;
  for (size_t i = 0; i < spec.feeds.size(); ++i) {
    const std::string& name = graph.node(spec.feeds[i]).name();
    if (part.FindNode(name)) share.feeds.push_back({static_cast<int>(i), name});
  }
  for (size_t i = 0; i < spec.fetches.size(); ++i) {
    const std::string& name = graph.node(spec.fetches[i].node).name();
    if (part.FindNode(name)) {
      share.fetches.push_back({static_cast<int>(i), name, spec.fetches[i].index});
    }
  }
  for (int t : spec.targets) {
    const std::string& name = graph.node(t).name();
    if (part.FindNode(name)) share.targets.push_back(name);
  }
  return share;
}

Result<PlanSpec> BindShare(const Graph& part, const PartitionShare& share, int num_feeds,
                           int num_fetches, bool plan_memory, bool run_sends,
                           std::string_view source) {
  PlanSpec spec;
  spec.plan_memory = plan_memory;
  std::vector<bool> feed_taken(num_feeds, false), fetch_taken(num_fetches, false);
  for (const auto& f : share.feeds) {
    if (f.index < 0 || f.index >= num_feeds || feed_taken[f.index]) {
      return InvalidArgument(
          "{}: feed {} ('{}') is not one of the step's {} feeds, or is given twice", source,
          f.index, f.node, num_feeds);
    }
    feed_taken[f.index] = true;
    auto node = part.FindNode(f.node);
    if (!node || part.node(*node).role() != OpRole::kPlaceholder) {
      return InvalidArgument("{}: feed '{}' is not a placeholder of it", source, f.node);
    }
    spec.feeds.push_back(*node);
  }
  for (const auto& f : share.fetches) {
    if (f.index < 0 || f.index >= num_fetches || fetch_taken[f.index]) {
      return InvalidArgument(
          "{}: fetch {} ('{}') is not one of the step's {} fetches, or is given twice", source,
          f.index, f.node, num_fetches);
    }
    fetch_taken[f.index] = true;
    auto node = part.FindNode(f.node);
    if (!node || f.output < 0 || f.output >= part.node(*node).num_outputs()) {
      return InvalidArgument("{}: fetch '{}:{}' is not an output of it", source, f.node, f.output);
    }
    spec.fetches.push_back({*node, f.output});
  }
  for (const auto& t : share.targets) {
    auto node = part.FindNode(t);
    if (!node) return InvalidArgument("{}: target '{}' is not a node of it", source, t);
    spec.targets.push_back(*node);
  }
  for (int id = 0; run_sends && id < part.num_nodes(); ++id) {
    if (part.node(id).role() == OpRole::kSend) spec.targets.push_back(id);
  }
  return spec;
}

}  // namespace dflow
