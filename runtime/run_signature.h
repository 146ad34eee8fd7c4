// A run signature: the feeds, fetches and targets a Run names. Every session (the local one, the
// distributed master) resolves and checks a Run through these functions, so that one Run gives
// one error text whichever session gets it, and keys its cache of compiled steps by Key().
//
//   ASSIGN_OR_RETURN(std::vector<int> fed, CheckRun(graph, feeds, fetches, targets));
//   ASSIGN_OR_RETURN(PlanSpec spec, ResolveRun(graph, feeds, fetches, targets));
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/tensor.h"
#include "runtime/executor.h"

namespace dflow {

// Placeholders by name ("x" or "x:0") with the values they take.
using Feeds = std::vector<std::pair<std::string, Tensor>>;

// The key a compiled step is cached under: the feed, fetch and target names as given.
std::string SignatureKey(const Feeds& feeds, const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets);

// Checks one fed value against the graph: NotFound for a name not in the graph; InvalidArgument
// for a node that is not a Placeholder, an output other than 0, an empty tensor, a dtype or
// shape the placeholder does not take, or a tensor not in host memory. Returns the node id.
Result<int> CheckFeed(const Graph& graph, const std::string& name, const Tensor& value);

// What every Run checks before its step is looked up: InvalidArgument for a Run with neither
// fetches nor targets and for a placeholder fed twice, and CheckFeed of every feed. The fed
// node ids, in feed order.
Result<std::vector<int>> CheckRun(const Graph& graph, const Feeds& feeds,
                                  const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets);

// The plan a Run asks for, by node ids (feed values are not looked at: CheckRun does that).
// NotFound for a feed, fetch or target naming no node; InvalidArgument for a fetch of an
// output the node does not have.
Result<PlanSpec> ResolveRun(const Graph& graph, const Feeds& feeds,
                            const std::vector<std::string>& fetches,
                            const std::vector<std::string>& targets, bool plan_memory = true);

}  // namespace dflow
