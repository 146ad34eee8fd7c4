// The stages from a validated graph to a compiled step, each a function of the previous stage's
// output (docs/architecture.md draws them):
//
//   CreateSessionDevices(options)         -> devices and their DeviceSet (below)
//   PlaceForSession(graph, set, options)  -> PlacementReport  (below; Place in placer/placer.h)
//   PartitionGraph(graph, devices, device_of) -> PartitionedGraph   placer/partition.h
//   CompileForDevice(partition, spec, device) -> ExecutionPlan   (below; rewrites inside)
//   PartitionedPlan::Compile(...)         -> PartitionedPlan   runtime/partitioned_plan.h:
//                                            prune, partition, compile every device's part
//
// A session (runtime/session.h) is a cache of compiled signatures in front of these; tools call
// them directly (dflow-dot places without a session).
#pragma once

#include <memory>

#include "framework/device.h"
#include "graph/graph.h"
#include "placer/placer.h"
#include "runtime/executor.h"
#include "runtime/session.h"

namespace dflow {

// The devices a session's options name, made through the DeviceFactory, and the DeviceSet the
// placer sees: `devices` (or the one `device`), each with an equal share of the thread budget
// when there are several, its memory limit (device_memory_bytes, else the device's default) as
// the placer's memory, calibrated figures (calibrate_devices: the host CPU measured, then each
// device type's calibrate and link hooks, framework/device_type.h), and
// device_specs by canonical name. `shareable_memory`: DeviceOptions::shareable_memory (a
// worker's devices). InvalidArgument names a device given twice or a device_specs entry that
// names no device; NotFound a device type not built.
struct SessionDevices {
  std::vector<std::unique_ptr<Device>> devices;
  DeviceSet set;
};
Result<SessionDevices> CreateSessionDevices(const SessionOptions& options,
                                            bool shareable_memory = false);

// Places validated `graph` as a session with `options` does: with `devices` given, the placer
// with the options' placer settings, cost file and logging; on the one `device`, every node on
// it after checking the nodes' requests (FailedPrecondition naming node and device).
Result<PlacementReport> PlaceForSession(const Graph& graph, const DeviceSet& devices,
                                        const SessionOptions& options);

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
