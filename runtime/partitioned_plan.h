// PartitionedPlan: one step over several devices. Compiling prunes the graph to what the
// fetches and targets need, partitions it by the placement (placer/partition.h) and compiles one
// ExecutionPlan per device. A run starts every device's plan at once (the caller's thread runs
// the first) over a fresh LocalRendezvous. The first error on any device aborts the rendezvous,
// so every pending Recv fails and no device waits forever; that original error, not a derived
// one, is returned. An optional timeout aborts the step with DeadlineExceeded.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "placer/device_set.h"
#include "runtime/device.h"
#include "runtime/executor.h"

namespace dflow {

class PartitionedPlan {
 public:
  struct Options {
    bool fuse_epilogues = true;
    bool plan_memory = true;
  };
  // `spec` refers to node ids of `graph`; `devices[i]` runs DeviceSet device i.
  static Result<std::unique_ptr<PartitionedPlan>> Compile(
      const Graph& graph, const std::vector<int>& device_of, const DeviceSet& device_set,
      const std::vector<Device*>& devices, const PlanSpec& spec, const Options& options);

  // `node_seconds`, when set, receives per partition the compute seconds of each node of
  // partition_graph(i) (see ExecutionPlan::RunOptions::node_seconds); `node_spans` likewise
  // their spans (ExecutionPlan::RunOptions::node_spans).
  Status Run(const std::vector<Tensor>& feeds, std::vector<Tensor>* fetches,
             std::optional<std::chrono::milliseconds> timeout,
             std::vector<std::vector<double>>* node_seconds = nullptr,
             std::vector<std::vector<NodeSpan>>* node_spans = nullptr) const;

  int num_partitions() const { return static_cast<int>(parts_.size()); }
  int send_recv_pairs() const { return send_recv_pairs_; }
  // The graph device partition i runs (after rewrites), and its device index.
  const Graph& partition_graph(int i) const { return parts_[i].plan->graph(); }
  int partition_device(int i) const { return parts_[i].device; }

 private:
  struct Part {
    int device;
    std::unique_ptr<ExecutionPlan> plan;
    std::vector<int> feeds;    // indices into the step's feeds, in the plan's order
    std::vector<int> fetches;  // indices into the step's fetches, in the plan's order
  };
  std::vector<Part> parts_;
  int num_fetches_ = 0;
  int send_recv_pairs_ = 0;
  mutable std::atomic<int64_t> next_step_{1};
};

}  // namespace dflow
