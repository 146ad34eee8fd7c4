// Session: runs a graph on one or more devices. Run(feeds, fetches, targets) checks every feed
// against its placeholder, compiles each distinct (feeds, fetches, targets) signature once
// through the compile stages (runtime/compile.h) and caches it, so repeated runs pay no planning.
// Variables keep their values across runs for the session's life.
//
//   auto session = Session::Create(scope);            // or Create(graph, options)
//   auto out = (*session)->Run({{"x", x}}, {"y:0"});  // out->at(0) is y
//
// Session is an interface: Create makes the in-process implementation (runtime/local_session.h);
// a distributed one fits behind the same calls. Run is thread-safe; concurrent runs of the same
// signature share the compiled step, and compiling one signature does not hold up runs of
// others.
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

#include "framework/device_options.h"
#include "graph/graph.h"
#include "graph/scope.h"
#include "placer/placer.h"
#include "runtime/cancellation.h"
#include "runtime/executor.h"
#include "runtime/run_signature.h"
#include "runtime/step_trace.h"

namespace dflow {

struct SessionOptions {
  // The CPU cores dflow may use and how they are split (framework/device_options.h).
  ThreadBudget threads;
  // The device the graph runs on when `devices` is empty.
  std::string device = "cpu:0";
  // Several devices: "cpu:0", "cpu:1", ... (virtual CPU devices, each with an equal share of the
  // thread budget), or any type registered with the DeviceFactory (framework/device_factory.h).
  // The placer assigns every node, the graph is partitioned per run signature, and every device
  // runs its part at once, joined by Send/Recv.
  std::vector<std::string> devices;
  PlacerOptions placer;
  // The memory limit of each device, in bytes (0: the device type's default; a CPU device's is
  // the machine's physical memory). The placer plans with it and the device's allocator
  // enforces it: going over it is ResourceExhausted naming the node, the device, the bytes
  // asked and the limit. Set it low to make a model that would fit one device spread over
  // several.
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
  // Rewrite each plan's graph with epilogue fusion (rewrite/fusion.h): bias and ReLU folded into
  // the MatMul or Conv2D producing them. Results are the same; turn it off to compare or debug.
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
  // Each device's peak, in device order; peak_bytes is their sum.
  std::vector<size_t> device_peak_bytes;
  PlanMemoryStats memory;  // of the plan that ran (its first partition's)
};

class Session {
 public:
  // Validates `graph` once (errors name the node), creates the devices through the
  // DeviceFactory and, with several devices, places the graph. Nodes that request a device the
  // session does not have are a FailedPrecondition naming node and device.
  static Result<std::unique_ptr<Session>> Create(Graph graph, const SessionOptions& options = {});
  // The scope's first error if it has one; otherwise a session on a copy of its graph.
  static Result<std::unique_ptr<Session>> Create(const Scope& scope,
                                                 const SessionOptions& options = {});
  virtual ~Session() = default;

  using Feeds = dflow::Feeds;
  struct RunOptions {
    // A step not done by then is aborted with DeadlineExceeded, on one device or many: no
    // further node starts and every pending Recv fails. (A kernel already running finishes.)
    std::optional<std::chrono::milliseconds> timeout;
    // Cancel() on it, from any thread, aborts the run with Cancelled the same way.
    CancellationToken* cancellation = nullptr;
    // Time every node's computation; MeasuredNodeCosts() gives the means over profiled runs.
    bool profile = false;
    // When set, receives when and where each node ran (runtime/step_trace.h), also for a step
    // that failed; WriteChromeTrace turns traced steps into a timeline file.
    StepTrace* trace = nullptr;
  };
  // Feeds name placeholders ("x" or "x:0"); fetches name tensors ("y" or "y:1"); targets name
  // nodes run for their effects. Returns the fetched tensors in order. Errors: NotFound for a
  // name not in the graph; InvalidArgument for a feed that is not a placeholder, has the wrong
  // dtype or shape, or is given twice, and for a needed placeholder left unfed; a node's error
  // with the node named.
  virtual Result<std::vector<Tensor>> Run(const Feeds& feeds,
                                          const std::vector<std::string>& fetches,
                                          const std::vector<std::string>& targets,
                                          const RunOptions& options) = 0;
  Result<std::vector<Tensor>> Run(const Feeds& feeds, const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets = {}) {
    return Run(feeds, fetches, targets, RunOptions{});
  }

  // Writes every variable's value to a checkpoint file (serialization/checkpoint_file.h),
  // atomically. FailedPrecondition naming a variable that was never assigned.
  virtual Status SaveCheckpoint(const std::string& path) = 0;
  // Every variable's value by name, as host tensors that later steps leave alone (an update
  // writes into a fresh buffer while another holder keeps the old one): what SaveCheckpoint
  // writes, taken between steps in about the time of a map of references, so that another
  // thread can write it while steps go on (runtime/train/checkpointer.h). FailedPrecondition naming
  // a variable that was never assigned.
  virtual Result<std::map<std::string, Tensor>> SnapshotVariables() = 0;
  // Sets every variable of the graph from a checkpoint, by name. Nothing changes unless all of
  // them can be restored: NotFound names a variable the file lacks; InvalidArgument names one
  // whose dtype or shape differs from the graph's, with the file. Variables in the file that
  // the graph lacks are ignored.
  virtual Status RestoreCheckpoint(const std::string& path) = 0;

  // Mean compute seconds per node over the profiled runs so far, keyed by device type and node
  // name, in the form the placer loads (MeasuredCosts::Save writes the cost file). Nodes a
  // rewrite folded into another have no entry; the fused node carries the chain's time.
  virtual MeasuredCosts MeasuredNodeCosts() const = 0;

  virtual const Graph& graph() const = 0;
  // The devices and the placement with its report (one device: every node on device 0).
  virtual const DeviceSet& device_set() const = 0;
  virtual const PlacementReport& placement() const = 0;
  virtual StepStats last_step_stats() const = 0;
  // Number of distinct signatures compiled so far.
  virtual int num_plans() const = 0;
};

}  // namespace dflow
