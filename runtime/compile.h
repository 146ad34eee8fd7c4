// The compile stage: a partition's graph and what a step asks of it (PlanSpec) become an
// ExecutionPlan for one device, after the graph rewrites the plan asks for (rewrite/fusion.h).
// The stages of a step, each a function of the previous stage's output (docs/architecture.md
// draws them):
//
//   CreateSessionDevices(options)         -> devices, DeviceSet  runtime/session_devices.h
//   PlaceForSession(graph, set, options)  -> PlacementReport     runtime/session_devices.h
//   ResolveRun(graph, feeds, ...)         -> PlanSpec            runtime/run_signature.h
//   NeededNodes(graph, spec)              -> the pruned nodes    rewrite/prune.h
//   PartitionGraph(graph, set, device_of) -> PartitionedGraph    partition/partition.h
//   ShareOf, BindShare                    -> each part's spec    partition/partition_share.h
//   CompileForDevice(part, spec, device)  -> ExecutionPlan       (below)
//   PartitionedPlan::Compile(...)         -> PartitionedPlan     runtime/partitioned_plan.h
//
// A session (runtime/session.h) is a cache of compiled signatures in front of these; tools call
// them directly (dflow-dot places without a session).
#pragma once

#include <memory>

#include "framework/device.h"
#include "graph/graph.h"
#include "runtime/executor.h"

namespace dflow {

struct CompileOptions {
  // Rewrite with epilogue fusion (rewrite/fusion.h) before compiling; fed, fetched and target nodes
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
