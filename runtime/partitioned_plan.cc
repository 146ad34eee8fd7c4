#include "runtime/partitioned_plan.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "ops/fusion.h"
#include "placer/partition.h"
#include "runtime/local_rendezvous.h"

namespace dflow {

Result<std::unique_ptr<PartitionedPlan>> PartitionedPlan::Compile(
    const Graph& graph, const std::vector<int>& device_of, const DeviceSet& device_set,
    const std::vector<Device*>& devices, const PlanSpec& spec, const Options& options) {
  const int n = graph.num_nodes();
  ASSIGN_OR_RETURN(std::vector<bool> needed, NeededNodes(graph, spec));
  Graph pruned(&graph.registry());
  std::vector<int> pruned_device;
  for (int id = 0; id < n; ++id) {
    if (!needed[id]) continue;
    RETURN_IF_ERROR(pruned.AddNode(graph.node(id).def()).status());
    pruned_device.push_back(device_of[id]);
  }
  RETURN_IF_ERROR(pruned.Validate());
  ASSIGN_OR_RETURN(PartitionedGraph parts, PartitionGraph(pruned, device_set, pruned_device));

  auto plan = std::unique_ptr<PartitionedPlan>(new PartitionedPlan);
  plan->num_fetches_ = static_cast<int>(spec.fetches.size());
  plan->send_recv_pairs_ = parts.send_recv_pairs;
  for (auto& part : parts.partitions) {
    const Graph& g = part.graph;
    Part p{part.device, nullptr, {}, {}};
    PlanSpec local;
    local.plan_memory = options.plan_memory;
    for (size_t i = 0; i < spec.feeds.size(); ++i) {
      if (auto id = g.FindNode(graph.node(spec.feeds[i]).name())) {
        local.feeds.push_back(*id);
        p.feeds.push_back(static_cast<int>(i));
      }
    }
    for (size_t i = 0; i < spec.fetches.size(); ++i) {
      if (auto id = g.FindNode(graph.node(spec.fetches[i].node).name())) {
        local.fetches.push_back({*id, spec.fetches[i].index});
        p.fetches.push_back(static_cast<int>(i));
      }
    }
    for (int t : spec.targets) {
      if (auto id = g.FindNode(graph.node(t).name())) local.targets.push_back(*id);
    }
    for (int id = 0; id < g.num_nodes(); ++id) {
      if (g.node(id).op() == "_Send") local.targets.push_back(id);
    }
    Device* device = devices[part.device];
    if (options.fuse_epilogues) {
      std::vector<int> keep = local.feeds;
      keep.insert(keep.end(), local.targets.begin(), local.targets.end());
      for (const auto& e : local.fetches) keep.push_back(e.node);
      ASSIGN_OR_RETURN(ops::FusedGraph fused, ops::FuseEpilogues(g, keep));
      auto rewritten = std::make_shared<const Graph>(std::move(fused.graph));
      auto remap = [&](int& id) { id = *rewritten->FindNode(g.node(id).name()); };
      for (int& f : local.feeds) remap(f);
      for (int& t : local.targets) remap(t);
      for (auto& e : local.fetches) remap(e.node);
      ASSIGN_OR_RETURN(p.plan, ExecutionPlan::Compile(std::move(rewritten), local, device));
    } else {
      auto owned = std::make_shared<const Graph>(std::move(part.graph));
      ASSIGN_OR_RETURN(p.plan, ExecutionPlan::Compile(std::move(owned), local, device));
    }
    plan->parts_.push_back(std::move(p));
  }
  return plan;
}

Status PartitionedPlan::Run(const std::vector<Tensor>& feeds, std::vector<Tensor>* fetches,
                            std::optional<std::chrono::milliseconds> timeout,
                            std::vector<std::vector<double>>* node_seconds,
                            std::vector<std::vector<NodeSpan>>* node_spans) const {
  LocalRendezvous rendezvous;
  std::mutex mu;
  std::condition_variable cv;
  Status first;                                   // GUARDED_BY(mu): the step's first error
  int running = static_cast<int>(parts_.size());  // GUARDED_BY(mu)
  ExecutionPlan::RunOptions options;
  options.step = {next_step_.fetch_add(1), &rendezvous};
  options.on_error = [&](const Status& s) {
    {
      std::lock_guard lock(mu);
      if (!first.ok()) return;
      first = s;
    }
    rendezvous.Abort(s);
  };
  std::vector<std::vector<Tensor>> outs(parts_.size());
  std::vector<Status> statuses(parts_.size());
  // One entry per node of each partition's graph.
  auto size_per_node = [&](auto* per_part, auto initial) {
    if (per_part == nullptr) return;
    per_part->resize(parts_.size());
    for (size_t i = 0; i < parts_.size(); ++i) {
      (*per_part)[i].assign(parts_[i].plan->graph().num_nodes(), initial);
    }
  };
  size_per_node(node_seconds, 0.0);
  size_per_node(node_spans, NodeSpan{});
  auto run_part = [&](size_t i) {
    std::vector<Tensor> in;
    for (int f : parts_[i].feeds) in.push_back(feeds[f]);
    ExecutionPlan::RunOptions part_options = options;
    if (node_seconds != nullptr) part_options.node_seconds = &(*node_seconds)[i];
    if (node_spans != nullptr) part_options.node_spans = &(*node_spans)[i];
    statuses[i] = parts_[i].plan->Run(in, &outs[i], part_options);
    if (!statuses[i].ok()) options.on_error(statuses[i]);
    std::lock_guard lock(mu);
    if (--running == 0) cv.notify_all();
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < parts_.size(); ++i) threads.emplace_back(run_part, i);
  std::thread watchdog;
  if (timeout) {
    watchdog = std::thread([&] {
      std::unique_lock lock(mu);
      if (cv.wait_for(lock, *timeout, [&] { return running == 0; })) return;
      lock.unlock();
      options.on_error(DeadlineExceeded("the step did not finish within {} ms", timeout->count()));
    });
  }
  run_part(0);
  for (auto& t : threads) t.join();
  if (watchdog.joinable()) watchdog.join();
  {
    std::lock_guard lock(mu);
    if (!first.ok()) return first;
  }
  fetches->assign(num_fetches_, Tensor());
  for (size_t i = 0; i < parts_.size(); ++i) {
    for (size_t k = 0; k < parts_[i].fetches.size(); ++k) {
      (*fetches)[parts_[i].fetches[k]] = outs[i][k];
    }
  }
  return Status::OK();
}

}  // namespace dflow
