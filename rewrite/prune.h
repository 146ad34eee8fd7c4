// Pruning: what a run of a graph computes (PlanSpec: the placeholders fed, the tensors fetched,
// the nodes run for their effects) and the nodes it needs. Every plan is compiled over the pruned
// graph (runtime/executor.h), and a partitioned step partitions only what it needs
// (partition/partition.h).
#pragma once

#include <vector>

#include "graph/graph.h"

namespace dflow {

// What a plan computes: placeholders fed, tensors fetched, nodes run for their effects.
struct PlanSpec {
  std::vector<int> feeds;         // Placeholder node ids, in feed order
  std::vector<Endpoint> fetches;  // in fetch order
  std::vector<int> targets;       // node ids
  // Serve node outputs from an arena planned per feed-shape signature (runtime/memory_plan.h).
  bool plan_memory = true;
};

// Prunes: the nodes the fetches and targets reach through data and control inputs, plus the fed
// placeholders. InvalidArgument names a needed placeholder that is not fed.
Result<std::vector<bool>> NeededNodes(const Graph& graph, const PlanSpec& spec);

}  // namespace dflow
