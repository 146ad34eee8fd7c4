// The stages from a validated graph to a compiled step, each a function of the previous stage's
// output (docs/architecture.md draws them):
//
//   Place(graph, devices, options)        -> PlacementReport   placer/placer.h
//   PartitionGraph(graph, devices, device_of) -> PartitionedGraph   placer/partition.h
//   CompileForDevice(partition, spec, device) -> ExecutionPlan   (below; rewrites inside)
//   PartitionedPlan::Compile(...)         -> PartitionedPlan   runtime/partitioned_plan.h:
//                                            prune, partition, compile every device's part
//
// A session (runtime/session.h) is a cache of compiled signatures in front of these; tools call
// them directly (dflow-dot places without a session).
#pragma once

#include <memory>

#include "graph/graph.h"
#include "runtime/device.h"
#include "runtime/executor.h"

namespace dflow {

struct CompileOptions {
  // Rewrite with epilogue fusion (ops/fusion.h) before compiling; fed, fetched and target nodes
  // keep their values and names.
  bool fuse_epilogues = true;
};

// Compiles `spec` over validated `graph` for `device`, rewriting a copy of the graph first when
// options ask for it. The plan keeps `graph` alive.
Result<std::unique_ptr<ExecutionPlan>> CompileForDevice(std::shared_ptr<const Graph> graph,
                                                        const PlanSpec& spec, Device* device,
                                                        const CompileOptions& options);
// The same over a graph that outlives the plan (no copy unless a rewrite makes one).
Result<std::unique_ptr<ExecutionPlan>> CompileForDevice(const Graph& graph, const PlanSpec& spec,
                                                        Device* device,
                                                        const CompileOptions& options);

}  // namespace dflow
