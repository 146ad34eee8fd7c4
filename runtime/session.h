// Session: runs a graph on a device. Run(feeds, fetches, targets) checks every feed against its
// placeholder, compiles a plan for each distinct (feeds, fetches, targets) signature once and
// caches it, so repeated runs pay no planning. Variables keep their values across runs for the
// session's life.
//
//   auto session = Session::Create(scope);            // or Create(graph, options)
//   auto out = (*session)->Run({{"x", x}}, {"y:0"});  // out->at(0) is y
//
// Run is thread-safe; concurrent runs of the same signature share the compiled plan.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/scope.h"
#include "placer/placer.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/partitioned_plan.h"
#include "runtime/step_trace.h"

namespace dflow {

struct SessionOptions {
  // The CPU cores dflow may use and how they are split (see runtime/device.h).
  ThreadBudget threads;
  // The device the graph runs on when `devices` is empty.
  std::string device = "cpu:0";
  // Several devices: "cpu:0", "cpu:1", ... (virtual CPU devices, each with an equal share of the
  // thread budget). The placer assigns every node, the graph is partitioned per run signature,
  // and every device runs its part at once, joined by Send/Recv.
  std::vector<std::string> devices;
  PlacerOptions placer;
  // Memory each of `devices` offers the placer, in bytes (0: DeviceSpec's default). Set it low to
  // make a model that would fit one device spread over several.
  double device_memory_bytes = 0;
  // The placer's figures for `devices` (speed, launch overhead, the links between them) come
  // from a calibration of this machine (runtime/calibration.h), measured once per process in
  // about a tenth of a second. Off: DeviceSpec's and LinkDefaults' fixed defaults.
  bool calibrate_devices = true;
  // Figures for named devices ("cpu:1" -> spec; the spec's name is ignored), replacing
  // calibration's and device_memory_bytes. A name not among `devices` is an InvalidArgument.
  std::map<std::string, DeviceSpec> device_specs;
  // Measured per-node seconds for the placer (placer/cost_model.h's JSON), e.g. saved from
  // a profiled session's MeasuredNodeCosts(); its figures replace the estimates.
  std::string cost_file;
  // Print the placement summary and each node's device to stderr once, when the session is
  // created. placement() has the same report either way.
  bool log_placement = false;
  // Rewrite each plan's graph with epilogue fusion (ops/fusion.h): bias and ReLU folded into the
  // MatMul or Conv2D producing them. Results are the same; turn it off to compare or debug.
  bool fuse_epilogues = true;
  // Serve node outputs from an arena planned per feed-shape signature (runtime/memory_plan.h).
  bool plan_memory = true;
};

// What the latest Run used.
struct StepStats {
  // The most bytes the device held in tensors at once during the run: variables, the plan's
  // arena and every other live tensor (the allocator's cached free blocks are not counted).
  // Concurrent runs share the device, so their peaks mix.
  size_t peak_bytes = 0;
  // Multi-device sessions: each device's peak, in device order; peak_bytes is their sum.
  std::vector<size_t> device_peak_bytes;
  PlanMemoryStats memory;  // of the plan that ran
};

class Session {
 public:
  // Validates `graph` (errors name the node) and creates the device. Nodes that request a
  // device the session does not have are a FailedPrecondition naming node and device.
  static Result<std::unique_ptr<Session>> Create(Graph graph, const SessionOptions& options = {});
  // The scope's first error if it has one; otherwise a session on a copy of its graph.
  static Result<std::unique_ptr<Session>> Create(const Scope& scope,
                                                 const SessionOptions& options = {});

  using Feeds = std::vector<std::pair<std::string, Tensor>>;
  // Feeds name placeholders ("x" or "x:0"); fetches name tensors ("y" or "y:1"); targets name
  // nodes run for their effects. Returns the fetched tensors in order. Errors: NotFound for a
  // name not in the graph; InvalidArgument for a feed that is not a placeholder, has the wrong
  // dtype or shape, or is given twice, and for a needed placeholder left unfed; a node's error
  // with the node named.
  Result<std::vector<Tensor>> Run(const Feeds& feeds, const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets = {});
  struct RunOptions {
    // A multi-device step not done by then is aborted with DeadlineExceeded. (A single-device
    // run never waits on another device, so it always ends.)
    std::optional<std::chrono::milliseconds> timeout;
    // Time every node's computation; MeasuredNodeCosts() gives the means over profiled runs.
    bool profile = false;
    // When set, receives when and where each node ran (runtime/step_trace.h), also for a step
    // that failed; WriteChromeTrace turns traced steps into a timeline file.
    StepTrace* trace = nullptr;
  };
  Result<std::vector<Tensor>> Run(const Feeds& feeds, const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets,
                                  const RunOptions& options);

  // Multi-device sessions: the device set, and the placement with its report.
  const DeviceSet& device_set() const { return device_set_; }
  const PlacementReport& placement() const { return placement_; }
  bool multi_device() const { return !options_.devices.empty(); }
  // The partitioned plan for a signature (compiling it if needed), for tests and tools.
  Result<const PartitionedPlan*> PartitionedPlanFor(const Feeds& feeds,
                                                    const std::vector<std::string>& fetches,
                                                    const std::vector<std::string>& targets = {});

  // Writes every variable's value to a checkpoint file (serialization/checkpoint_file.h),
  // atomically. FailedPrecondition naming a variable that was never assigned.
  Status SaveCheckpoint(const std::string& path);
  // Sets every variable of the graph from a checkpoint, by name. Nothing changes unless all of
  // them can be restored: NotFound names a variable the file lacks; InvalidArgument names one
  // whose dtype or shape differs from the graph's, with the file. Variables in the file that
  // the graph lacks are ignored.
  Status RestoreCheckpoint(const std::string& path);

  // Mean compute seconds per node over the profiled runs so far, keyed by device type and node
  // name, in the form the placer loads (MeasuredCosts::Save writes the cost file). Nodes a
  // rewrite folded into another have no entry; the fused node carries the chain's time.
  MeasuredCosts MeasuredNodeCosts() const;

  const Graph& graph() const { return graph_; }
  // The (first) device.
  CpuDevice& device() { return *devices_[0]; }
  StepStats last_step_stats() const;
  // Number of distinct plans compiled so far.
  int num_plans() const;
  // The graph the plan for this signature runs, after rewrites (compiling it if needed): for
  // tests and tools that show what was fused.
  Result<const Graph*> PlannedGraph(const Feeds& feeds, const std::vector<std::string>& fetches,
                                    const std::vector<std::string>& targets = {});

 private:
  Session(Graph graph, std::vector<std::unique_ptr<CpuDevice>> devices,
          const SessionOptions& options)
      : graph_(std::move(graph)), devices_(std::move(devices)), options_(options) {}
  // The plan spec of a signature, by node ids of graph_.
  Result<PlanSpec> Spec(const Feeds& feeds, const std::vector<std::string>& fetches,
                        const std::vector<std::string>& targets) const;
  Result<const ExecutionPlan*> GetPlan(const Feeds& feeds, const std::vector<std::string>& fetches,
                                       const std::vector<std::string>& targets);
  Status CheckFeed(const std::string& name, const Tensor& value, int* node) const;

  Graph graph_;
  std::atomic<int64_t> runs_{0};  // Run calls so far
  std::vector<std::unique_ptr<CpuDevice>> devices_;
  SessionOptions options_;
  DeviceSet device_set_;
  PlacementReport placement_;
  std::unordered_map<std::string, std::unique_ptr<PartitionedPlan>>
      partitioned_;  // GUARDED_BY(mu_)
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<ExecutionPlan>> plans_;  // GUARDED_BY(mu_)
  StepStats last_step_;                                                    // GUARDED_BY(mu_)
  // Profiled runs: device type -> node -> (seconds, runs).
  std::map<std::string, std::unordered_map<std::string, std::pair<double, int>>>
      profile_;  // GUARDED_BY(mu_)
  // Appends the nodes of `graph` that ran on `device`, with their spans, to `trace`.
  static void AddTrace(const std::string& device, const Graph& graph,
                       const std::vector<NodeSpan>& spans, StepTrace* trace);
  // Adds one profiled run of `graph` on a device of `type`.
  void AddProfile(const std::string& type, const Graph& graph, const std::vector<double>& seconds);
};

}  // namespace dflow
