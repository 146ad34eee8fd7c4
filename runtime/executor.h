// ExecutionPlan: a compiled, immutable program for one device, and the dataflow executor that
// runs it.
//
// Compiling prunes the graph to what the fetches and targets need, creates one kernel per
// node, and lays out a flat node array: each node's input value slots, output slots and
// successors are index ranges into shared arrays. A run copies the initial pending counts and
// use counts (plain int32 arrays, decremented with atomic_ref) and starts from the nodes with
// nothing pending. A thread runs the nodes it makes ready itself, depth first; it hands extra
// expensive ready nodes to the device's pool when it has one. A value is released right after
// its last consumer ran. The first error stops the run (nodes not yet started are dropped) and
// is returned with the node and device named.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/device.h"
#include "framework/kernel.h"
#include "graph/graph.h"
#include "graph/mutex.h"
#include "rewrite/prune.h"
#include "runtime/cancellation.h"
#include "runtime/memory_plan.h"
#include "runtime/step_trace.h"

namespace dflow {

// How a plan's outputs were served so far.
struct PlanMemoryStats {
  int patterns = 0;          // feed-shape signatures planned
  size_t arena_bytes = 0;    // arena of the latest planned run
  size_t unplanned_sum = 0;  // what its planned buffers would take without reuse
  size_t live_bound = 0;     // the most of them alive at once (a lower bound on the arena)
  int64_t planned = 0;       // outputs placed in an arena
  int64_t fallbacks = 0;     // planned outputs that went to the device allocator instead
};

class ExecutionPlan {
 public:
  // Compiles `spec` over validated `graph` for `device`. InvalidArgument when a needed
  // placeholder is not fed; NotFound when a needed node has no kernel for the device type.
  // The graph must outlive the plan.
  static Result<std::unique_ptr<ExecutionPlan>> Compile(const Graph& graph, const PlanSpec& spec,
                                                        Device* device);
  // The same over a graph the plan keeps alive (a rewritten copy made for this plan).
  static Result<std::unique_ptr<ExecutionPlan>> Compile(std::shared_ptr<const Graph> graph,
                                                        const PlanSpec& spec, Device* device);
  ~ExecutionPlan();

  // What one run of a partition shares with the other devices of its step.
  struct RunOptions {
    StepInfo step;
    // The step's control, shared by its partitions: the run's first error aborts it (and with
    // it the step's rendezvous, so the other devices stop waiting); once it is aborted, by any
    // partition, a deadline or a cancellation, no further node starts. Null: the run stops on
    // its own errors only.
    StepControl* control = nullptr;
    // Profiling: when set (sized to graph().num_nodes()), each node's compute seconds are added
    // at its graph id: by the host's clock around Compute, or by the device's where it gives a
    // node timer (a GPU: the time its kernels ran). Asynchronous nodes (Recv) are not timed:
    // their time is waiting.
    std::vector<double>* node_seconds = nullptr;
    // Tracing: when set (sized to graph().num_nodes()), each node that ran gets its span at its
    // graph id; an asynchronous node's span runs from its start to its completion.
    std::vector<NodeSpan>* node_spans = nullptr;
  };

  // Runs once. `feeds` matches spec.feeds in order (dtype and shape already checked); fills
  // `fetches` in spec.fetches order. Thread-safe: concurrent runs use separate state.
  Status Run(const std::vector<Tensor>& feeds, std::vector<Tensor>* fetches,
             const RunOptions& options) const;
  Status Run(const std::vector<Tensor>& feeds, std::vector<Tensor>* fetches) const {
    return Run(feeds, fetches, RunOptions{});
  }

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  PlanMemoryStats memory_stats() const DFLOW_EXCLUDES(memory_mu_);
  // The graph the plan runs (after any rewrite).
  const Graph& graph() const { return *graph_; }

 private:
  struct PlanNode {
    std::unique_ptr<OpKernel> kernel;
    int graph_id;
    int input_begin, num_inputs;   // into input_slots_
    int output_base, num_outputs;  // value slots
    int succ_begin, num_succ;      // into successors_
    int dead_begin, num_dead;      // into dead_outputs_: outputs nobody reads
    bool expensive;
    bool allows_uninitialized_input;
    bool is_async;
    bool shares_input;  // a Send: its input goes to another device (see MarkShared)
  };
  struct RunState;

  ExecutionPlan() = default;
  // Runs the nodes in `local` and every node they make ready that stays on this thread.
  void Process(RunState* state, std::vector<int> local) const;
  void Ready(RunState* state, int node, std::vector<int>& local) const;
  Status RunNode(RunState* state, const PlanNode& n) const;
  // Starts an asynchronous node; its completion comes back through the run's inbox.
  void StartAsync(RunState* state, int node) const;
  // After node `id` ran: releases inputs read for the last time and readies successors.
  void Complete(RunState* state, int id, std::vector<int>& local) const;
  Status NodeError(const PlanNode& n, const Status& s) const;
  std::unique_ptr<RunState> AcquireState() const DFLOW_EXCLUDES(states_mu_);
  // Sets up the run's output memory: the arena of the feed shapes' pattern, or a recorder.
  void PrepareMemory(RunState* state, const std::vector<Tensor>& feeds) const
      DFLOW_EXCLUDES(memory_mu_);
  // Learns the pattern from a recording run; retires an arena that buffers outlived.
  void FinishMemory(RunState* state, bool ok) const DFLOW_EXCLUDES(memory_mu_);
  void ReleaseState(std::unique_ptr<RunState> state) const DFLOW_EXCLUDES(states_mu_);

  const Graph* graph_ = nullptr;
  std::shared_ptr<const Graph> owned_graph_;  // set when the plan owns its graph
  Device* device_ = nullptr;
  std::vector<PlanNode> nodes_;
  std::vector<int> input_slots_;
  std::vector<int> successors_;
  std::vector<int> dead_outputs_;
  std::vector<int32_t> initial_pending_;
  std::vector<int32_t> initial_uses_;
  std::vector<int> roots_;
  std::vector<int> feed_slots_;
  std::vector<int> fetch_slots_;
  std::vector<int> fetch_nodes_;  // graph ids, beside fetch_slots_
  int num_values_ = 0;

  bool plan_memory_ = true;
  static constexpr size_t kMaxPatterns = 8;
  mutable Mutex memory_mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const MemoryPattern>> patterns_
      DFLOW_GUARDED_BY(memory_mu_);
  mutable PlanMemoryStats memory_stats_ DFLOW_GUARDED_BY(memory_mu_);

  mutable Mutex states_mu_;
  mutable std::vector<std::unique_ptr<RunState>> free_states_ DFLOW_GUARDED_BY(states_mu_);
};

}  // namespace dflow
