#include "runtime/partitioned_plan.h"

#include <algorithm>

#include "framework/spin_wait.h"
#include "graph/mutex.h"
#include "partition/partition.h"
#include "runtime/compile.h"
#include "runtime/run_signature.h"

namespace dflow {

Result<std::unique_ptr<PartitionedPlan>> PartitionedPlan::Compile(
    const Graph& graph, const std::vector<int>& device_of, const DeviceSet& device_set,
    const std::vector<Device*>& devices, const PlanSpec& spec, const Options& options) {
  const int n = graph.num_nodes();
  ASSIGN_OR_RETURN(std::vector<bool> needed, NeededNodes(graph, spec));
  const int num_feeds = static_cast<int>(spec.feeds.size());
  const int num_fetches = static_cast<int>(spec.fetches.size());
  std::vector<Partition> partitions;

  // One device holds every needed node: its partition is the graph itself (not owned).
  int only = -1;
  bool one_device = true;
  for (int id = 0; id < n && one_device; ++id) {
    if (!needed[id]) continue;
    if (only < 0) only = device_of[id];
    one_device = device_of[id] == only;
  }
  if (one_device) {
    if (only < 0) only = 0;
    std::shared_ptr<const Graph> unowned(std::shared_ptr<const Graph>(), &graph);
    partitions.push_back({only, devices[only], unowned, ShareOf(graph, spec, graph),
                          devices[only]->canonical_name(), /*whole_graph=*/true});
    return CompilePartitions(std::move(partitions), num_feeds, num_fetches, options);
  }

  ASSIGN_OR_RETURN(PartitionedGraph parts, PartitionGraph(graph, device_set, device_of, &needed));
  for (int i = 0; i < static_cast<int>(parts.partitions.size()); ++i) {
    const int d = parts.partitions[i].device;
    ASSIGN_OR_RETURN(Graph g, BuildPartitionGraph(graph, device_set, parts, i));
    auto owned = std::make_shared<const Graph>(std::move(g));
    PartitionShare share = ShareOf(graph, spec, *owned);
    partitions.push_back({d, devices[d], std::move(owned), std::move(share),
                          fmt::format("the partition on {}", devices[d]->canonical_name())});
  }
  return CompilePartitions(std::move(partitions), num_feeds, num_fetches, options);
}

Result<std::unique_ptr<PartitionedPlan>> PartitionedPlan::CompilePartitions(
    std::vector<Partition> partitions, int num_feeds, int num_fetches, const Options& options) {
  auto plan = std::unique_ptr<PartitionedPlan>(new PartitionedPlan);
  plan->num_fetches_ = num_fetches;
  CompileOptions compile{.fuse_epilogues = options.fuse_epilogues};
  int recvs = 0;
  for (Partition& p : partitions) {
    ASSIGN_OR_RETURN(PlanSpec local, BindShare(*p.graph, p.share, num_feeds, num_fetches,
                                               options.plan_memory, !p.whole_graph, p.source));
    ASSIGN_OR_RETURN(std::vector<bool> needed, NeededNodes(*p.graph, local));
    for (int id = 0; id < p.graph->num_nodes(); ++id) {
      const OpRole role = p.graph->node(id).role();
      if (!needed[id]) continue;
      plan->send_recv_pairs_ += role == OpRole::kSend;
      recvs += role == OpRole::kRecv;
    }
    Part part{p.device_index, p.device, nullptr, {}, {}, {}};
    for (const auto& f : p.share.feeds) {
      part.feeds.push_back(f.index);
      part.feed_names.push_back(f.node);
    }
    for (const auto& f : p.share.fetches) part.fetches.push_back(f.index);
    ASSIGN_OR_RETURN(part.plan, CompileForDevice(std::move(p.graph), local, p.device, compile));
    plan->parts_.push_back(std::move(part));
  }
  // A worker's partitions may hold only the Recvs of a pair.
  plan->send_recv_pairs_ = std::max(plan->send_recv_pairs_, recvs);
  return plan;
}

Status PartitionedPlan::CheckFeeds(const std::vector<Tensor>& feeds) const {
  for (const Part& p : parts_) {
    for (size_t k = 0; k < p.feeds.size(); ++k) {
      if (p.feeds[k] >= static_cast<int>(feeds.size())) {
        return InvalidArgument("feed '{}' is missing", p.feed_names[k]);
      }
      RETURN_IF_ERROR(CheckFeed(p.plan->graph(), p.feed_names[k], feeds[p.feeds[k]]).status());
    }
  }
  return Status::OK();
}

Status PartitionedPlan::Run(const std::vector<Tensor>& feeds, std::vector<Tensor>* fetches,
                            const RunOptions& options) const {
  std::unique_ptr<Rendezvous> rendezvous;
  if (send_recv_pairs_ > 0) {
    if (options.rendezvous == nullptr) {
      return FailedPrecondition("a step with {} Send/Recv pairs needs a rendezvous factory",
                                send_recv_pairs_);
    }
    ASSIGN_OR_RETURN(rendezvous, options.rendezvous->Create(options.step_id));
  }
  StepControl control(options.step_id, options.timeout, rendezvous.get());
  int64_t cancel_id = 0;
  if (options.cancellation != nullptr) {
    cancel_id = options.cancellation->Register([&control](const Status& s) { control.Abort(s); });
  }
  ExecutionPlan::RunOptions base;
  base.step = {options.step_id, rendezvous.get()};
  base.control = &control;

  auto size_per_node = [&](auto* per_part, auto initial) {
    if (per_part == nullptr) return;
    per_part->resize(parts_.size());
    for (size_t i = 0; i < parts_.size(); ++i) {
      (*per_part)[i].assign(parts_[i].plan->graph().num_nodes(), initial);
    }
  };
  size_per_node(options.node_seconds, 0.0);
  size_per_node(options.node_spans, NodeSpan{});

  const size_t n = parts_.size();
  std::vector<std::vector<Tensor>> outs(n);
  auto run_part = [&](size_t i) {
    std::vector<Tensor> in;
    in.reserve(parts_[i].feeds.size());
    Device* device = parts_[i].runner;
    for (size_t k = 0; k < parts_[i].feeds.size(); ++k) {
      const int f = parts_[i].feeds[k];
      if (feeds[f].host_accessible() && !device->allocator()->host_accessible()) {
        // A fed value goes into the memory of the device that reads it.
        auto copied = device->CopyFromHost(feeds[f]);
        if (!copied.ok()) {
          control.Abort(copied.status().WithPrefix(
              fmt::format("feed '{}' to {}: ", parts_[i].feed_names[k], device->canonical_name())));
          return;
        }
        in.push_back(std::move(copied).value());
      } else {
        in.push_back(feeds[f]);
      }
    }
    ExecutionPlan::RunOptions part = base;
    if (options.node_seconds != nullptr) part.node_seconds = &(*options.node_seconds)[i];
    if (options.node_spans != nullptr) part.node_spans = &(*options.node_spans)[i];
    Status s = parts_[i].plan->Run(in, &outs[i], part);
    if (!s.ok()) control.Abort(s);
  };

  // Partitions on step threads still running. The last one to finish notifies under the mutex,
  // so the wait below never returns while a `then` still touches this frame. (A struct, as only
  // members can carry DFLOW_GUARDED_BY.)
  struct {
    Mutex mu;
    CondVar cv;
    bool all_done DFLOW_GUARDED_BY(mu);
  } finish{.all_done = n == 1};
  std::atomic<size_t> running{n - 1};
  for (size_t i = 1; i < n; ++i) {
    parts_[i].runner->step_threads()->Run([&run_part, i] { run_part(i); },
                                          [&] {
                                            MutexLock lock(finish.mu);
                                            if (running.fetch_sub(1) == 1) {
                                              finish.all_done = true;
                                              finish.cv.NotifyAll();
                                            }
                                          });
  }
  run_part(0);
  SpinFor([&] { return running.load(std::memory_order_acquire) == 0; });
  {
    MutexLock lock(finish.mu);
    finish.cv.Wait(finish.mu, [&]() DFLOW_REQUIRES(finish.mu) { return finish.all_done; });
  }
  if (options.cancellation != nullptr) options.cancellation->Unregister(cancel_id);
  Status status = control.status();
  if (!status.ok()) return status;
  fetches->assign(num_fetches_, Tensor());
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < parts_[i].fetches.size(); ++k) {
      Tensor& value = outs[i][k];
      if (value.valid() && !value.host_accessible()) {
        // A fetched value reaches host memory: the one place the host waits for the device.
        auto host = parts_[i].runner->CopyToHost(value);
        if (!host.ok()) {
          return host.status().WithPrefix(fmt::format("fetch {} from {}: ", parts_[i].fetches[k],
                                                      parts_[i].runner->canonical_name()));
        }
        value = std::move(host).value();
      }
      (*fetches)[parts_[i].fetches[k]] = std::move(value);
    }
  }
  return Status::OK();
}

}  // namespace dflow
