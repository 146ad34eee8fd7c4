// PartitionShare: which of a step's feeds, fetches and targets one of its partitions holds. This
// is the one place a step's signature is split per partition: a local session's compile, the
// distributed master (which sends every worker the shares of its partitions) and the worker
// (which binds the shares it receives to the partition graphs it receives) all go through it.
//
//   PartitionShare share = ShareOf(graph, spec, partition_graph);          // by node name
//   ASSIGN_OR_RETURN(PlanSpec local, BindShare(partition_graph, share, ...));  // checked
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"
#include "rewrite/prune.h"

namespace dflow {

struct PartitionShare {
  struct Feed {
    int index = 0;     // among the step's feeds
    std::string node;  // the placeholder
  };
  struct Fetch {
    int index = 0;  // among the step's fetches
    std::string node;
    int output = 0;
  };
  std::vector<Feed> feeds;
  std::vector<Fetch> fetches;
  std::vector<std::string> targets;
};

// The share of `part`, a partition of validated `graph` (its nodes found by name), in the step
// `spec` over `graph`.
PartitionShare ShareOf(const Graph& graph, const PlanSpec& spec, const Graph& part);

// The partition's own plan: the share's nodes in `part`, and with `run_sends` every _Send of
// `part` as a target (a partition's Sends run for their effect; off for a step's whole graph,
// which runs only what its fetches and targets need). A share may come from another process, so
// every entry is checked: InvalidArgument naming `source` for an index outside the step's
// (`num_feeds`, `num_fetches`) or given twice, a feed that is not a placeholder of `part`, a fetch
// of an output it lacks, or a target it lacks.
Result<PlanSpec> BindShare(const Graph& part, const PartitionShare& share, int num_feeds,
                           int num_fetches, bool plan_memory, bool run_sends,
                           std::string_view source);

}  // namespace dflow
