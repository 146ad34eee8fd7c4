// PartitionedPlan: a compiled step over one or more devices, the output of the compile stage
// (runtime/compile.h) for one run signature. Compiling prunes the graph to what
// the fetches and targets need, partitions it by the placement (partition/partition.h; when every
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

#include "framework/device.h"
#include "framework/rendezvous.h"
#include "partition/partition_share.h"
#include "placer/device_set.h"
#include "runtime/cancellation.h"
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

  // One partition to compile: its device, its graph (validated; the plan keeps it alive) and
  // its share of the step. `source` names it in errors ("partition 0 of signature s from
  // /job:master/task:0").
  struct Partition {
    int device_index = 0;  // in the caller's DeviceSet (for partition_device)
    Device* device = nullptr;
    std::shared_ptr<const Graph> graph;
    PartitionShare share;
    std::string source;
    // The step's whole graph on one device rather than a partition of it: only the share's
    // targets run, not every _Send (see BindShare).
    bool whole_graph = false;
  };
  // Compiles partitions of a step of `num_feeds` feeds and `num_fetches` fetches: every share
  // bound and checked (partition_share.h), every plan compiled with its rewrites. What a worker
  // does with the partitions its master sends; Compile ends here too.
  static Result<std::unique_ptr<PartitionedPlan>> CompilePartitions(
      std::vector<Partition> partitions, int num_feeds, int num_fetches, const Options& options);

  // Checks fed values against the placeholders of the partitions that take them (CheckFeed,
  // runtime/run_signature.h): what a worker does with feeds another process sent.
  Status CheckFeeds(const std::vector<Tensor>& feeds) const;

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
  // `feeds` in the step's feed order (checked by the caller; a feed no partition takes may be
  // an empty tensor); fills `fetches` in its fetch order (those no partition computes stay
  // empty). Thread-safe: concurrent runs use separate state.
  Status Run(const std::vector<Tensor>& feeds, std::vector<Tensor>* fetches,
             const RunOptions& options) const;

  int num_partitions() const { return static_cast<int>(parts_.size()); }
  // The Send/Recv pairs its partitions take part in (their _Send nodes, or their _Recv nodes
  // where there are more: a worker's partitions may hold one end only): one per pair the
  // partitioner added, plus any the graph had already.
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
    std::vector<int> feeds;               // indices into the step's feeds, in the plan's order
    std::vector<int> fetches;             // indices into the step's fetches, in the plan's order
    std::vector<std::string> feed_names;  // the placeholders fed, in the plan's order
  };
  std::vector<Part> parts_;
  int num_fetches_ = 0;
  int send_recv_pairs_ = 0;
};

}  // namespace dflow
