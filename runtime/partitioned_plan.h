// PartitionedPlan: a compiled step over one or more devices, the output of the pipeline's
// compile stage (runtime/pipeline.h) for one run signature. Compiling prunes the graph to what
// the fetches and targets need, partitions it by the placement (placer/partition.h; when every
// needed node is on one device, that device's partition is the graph itself) and compiles one
// ExecutionPlan per device, with its rewrites.
//
// A run makes the step's rendezvous through the given factory (only when partitions exchange
// tensors), starts every partition at once (the caller's thread runs the first, each other
// device's persistent step threads the rest) and waits for all. The step's control
// (runtime/cancellation.h) joins them: the first error on any device aborts the step, every
// executor stops starting nodes, every pending Recv fails, and that original error is
// returned. A timeout or a cancellation aborts the step the same way.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/rendezvous.h"
#include "placer/device_set.h"
#include "runtime/cancellation.h"
#include "runtime/device.h"
#include "runtime/executor.h"

namespace dflow {

class PartitionedPlan {
 public:
  struct Options {
    bool fuse_epilogues = true;
    bool plan_memory = true;
  };
  // `spec` refers to node ids of validated `graph`, which must outlive the plan;
  // `devices[i]` runs DeviceSet device i.
  static Result<std::unique_ptr<PartitionedPlan>> Compile(
      const Graph& graph, const std::vector<int>& device_of, const DeviceSet& device_set,
      const std::vector<Device*>& devices, const PlanSpec& spec, const Options& options);

  // One partition compiled elsewhere (a worker's share of a distributed step): the device that
  // runs it, its plan, and where its feeds and fetches sit among the step's.
  struct CompiledPart {
    Device* device = nullptr;
    std::unique_ptr<ExecutionPlan> plan;
    std::vector<int> feeds;
    std::vector<int> fetches;
  };
  // A plan over parts compiled by the caller; it runs them as Compile's plans run theirs.
  // `send_recv_pairs` > 0 makes Run create the step's rendezvous.
  static std::unique_ptr<PartitionedPlan> FromParts(std::vector<CompiledPart> parts,
                                                    int num_fetches, int send_recv_pairs);

  struct RunOptions {
    int64_t step_id = 0;  // from the session: unique among its concurrent steps
    // Makes the step's rendezvous; required when send_recv_pairs() > 0.
    RendezvousFactory* rendezvous = nullptr;
    std::optional<std::chrono::milliseconds> timeout;  // DeadlineExceeded after it
    CancellationToken* cancellation = nullptr;
    // Per partition, each node's compute seconds (ExecutionPlan::RunOptions::node_seconds),
    // and their spans (node_spans); sized here.
    std::vector<std::vector<double>>* node_seconds = nullptr;
    std::vector<std::vector<NodeSpan>>* node_spans = nullptr;
  };
  // `feeds` in the spec's feed order (checked by the caller); fills `fetches` in its fetch
  // order. Thread-safe: concurrent runs use separate state.
  Status Run(const std::vector<Tensor>& feeds, std::vector<Tensor>* fetches,
             const RunOptions& options) const;

  int num_partitions() const { return static_cast<int>(parts_.size()); }
  // Send/Recv pairs the partitioner added, plus any _Send or _Recv the graph had already.
  int send_recv_pairs() const { return send_recv_pairs_; }
  // The graph device partition i runs (after rewrites), its device index, and its plan.
  const Graph& partition_graph(int i) const { return parts_[i].plan->graph(); }
  int partition_device(int i) const { return parts_[i].device; }
  const ExecutionPlan& partition_plan(int i) const { return *parts_[i].plan; }

 private:
  struct Part {
    int device;
    Device* runner;
    std::unique_ptr<ExecutionPlan> plan;
    std::vector<int> feeds;    // indices into the step's feeds, in the plan's order
    std::vector<int> fetches;  // indices into the step's fetches, in the plan's order
  };
  std::vector<Part> parts_;
  int num_fetches_ = 0;
  int send_recv_pairs_ = 0;
  // The fed placeholders' names, for messages (empty for plans made FromParts).
  std::vector<std::string> feed_names_;
};

}  // namespace dflow
