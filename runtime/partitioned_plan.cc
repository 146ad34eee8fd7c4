#include "runtime/partitioned_plan.h"

#include "graph/mutex.h"
#include "placer/partition.h"
#include "runtime/pipeline.h"
#include "runtime/spin_wait.h"

namespace dflow {
namespace {

// The partition's spec: the step's feeds, fetches and targets that live in `g` (found by name),
// plus every _Send, which runs for its effect.
PlanSpec LocalSpec(const Graph& graph, const Graph& g, const PlanSpec& spec,
                   std::vector<int>* feeds, std::vector<int>* fetches) {
  PlanSpec local;
  local.plan_memory = spec.plan_memory;
  for (size_t i = 0; i < spec.feeds.size(); ++i) {
    if (auto id = g.FindNode(graph.node(spec.feeds[i]).name())) {
      local.feeds.push_back(*id);
      feeds->push_back(static_cast<int>(i));
    }
  }
  for (size_t i = 0; i < spec.fetches.size(); ++i) {
    if (auto id = g.FindNode(graph.node(spec.fetches[i].node).name())) {
      local.fetches.push_back({*id, spec.fetches[i].index});
      fetches->push_back(static_cast<int>(i));
    }
  }
  for (int t : spec.targets) {
    if (auto id = g.FindNode(graph.node(t).name())) local.targets.push_back(*id);
  }
  for (int id = 0; id < g.num_nodes(); ++id) {
    if (g.node(id).op() == "_Send") local.targets.push_back(id);
  }
  return local;
}

}  // namespace

Result<std::unique_ptr<PartitionedPlan>> PartitionedPlan::Compile(
    const Graph& graph, const std::vector<int>& device_of, const DeviceSet& device_set,
    const std::vector<Device*>& devices, const PlanSpec& spec, const Options& options) {
  const int n = graph.num_nodes();
  ASSIGN_OR_RETURN(std::vector<bool> needed, NeededNodes(graph, spec));
  auto plan = std::unique_ptr<PartitionedPlan>(new PartitionedPlan);
  plan->num_fetches_ = static_cast<int>(spec.fetches.size());
  for (int f : spec.feeds) plan->feed_names_.push_back(graph.node(f).name());
  CompileOptions compile{.fuse_epilogues = options.fuse_epilogues};

  // One device holds every needed node: its partition is the graph itself.
  int only = -1;
  bool one_device = true;
  for (int id = 0; id < n && one_device; ++id) {
    if (!needed[id]) continue;
    if (only < 0) only = device_of[id];
    one_device = device_of[id] == only;
  }
  // A hand-built _Send or _Recv needs the step's rendezvous too.
  for (int id = 0; id < n; ++id) {
    const std::string& op = graph.node(id).op();
    if (needed[id] && (op == "_Send" || op == "_Recv")) plan->send_recv_pairs_++;
  }
  if (one_device) {
    if (only < 0) only = 0;
    Part p{only, devices[only], nullptr, {}, {}};
    for (size_t i = 0; i < spec.feeds.size(); ++i) p.feeds.push_back(static_cast<int>(i));
    for (size_t i = 0; i < spec.fetches.size(); ++i) p.fetches.push_back(static_cast<int>(i));
    ASSIGN_OR_RETURN(p.plan, CompileForDevice(graph, spec, devices[only], compile));
    plan->parts_.push_back(std::move(p));
    return plan;
  }

  ASSIGN_OR_RETURN(PartitionedGraph parts, PartitionGraph(graph, device_set, device_of, &needed));
  plan->send_recv_pairs_ += parts.send_recv_pairs;
  for (int i = 0; i < static_cast<int>(parts.partitions.size()); ++i) {
    const int d = parts.partitions[i].device;
    ASSIGN_OR_RETURN(Graph g, BuildPartitionGraph(graph, device_set, parts, i));
    Part p{d, devices[d], nullptr, {}, {}};
    PlanSpec local = LocalSpec(graph, g, spec, &p.feeds, &p.fetches);
    auto owned = std::make_shared<const Graph>(std::move(g));
    ASSIGN_OR_RETURN(p.plan, CompileForDevice(std::move(owned), local, p.runner, compile));
    plan->parts_.push_back(std::move(p));
  }
  return plan;
}

std::unique_ptr<PartitionedPlan> PartitionedPlan::FromParts(std::vector<CompiledPart> parts,
                                                            int num_fetches, int send_recv_pairs) {
  auto plan = std::unique_ptr<PartitionedPlan>(new PartitionedPlan);
  plan->num_fetches_ = num_fetches;
  plan->send_recv_pairs_ = send_recv_pairs;
  for (size_t i = 0; i < parts.size(); ++i) {
    plan->parts_.push_back(Part{static_cast<int>(i), parts[i].device, std::move(parts[i].plan),
                                std::move(parts[i].feeds), std::move(parts[i].fetches)});
  }
  return plan;
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
    for (int f : parts_[i].feeds) {
      if (feeds[f].host_accessible() && !device->allocator()->host_accessible()) {
        // A fed value goes into the memory of the device that reads it.
        auto copied = device->CopyFromHost(feeds[f]);
        if (!copied.ok()) {
          control.Abort(copied.status().WithPrefix(fmt::format(
              "feed '{}' to {}: ",
              f < static_cast<int>(feed_names_.size()) ? feed_names_[f] : std::to_string(f),
              device->canonical_name())));
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
