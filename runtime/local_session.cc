#include "runtime/local_session.h"

#include <fmt/format.h>

#include <algorithm>

#include "ops/register.h"
#include "runtime/checkpoint_check.h"
#include "runtime/run_signature.h"
#include "runtime/session_devices.h"
#include "serialization/checkpoint_file.h"

namespace dflow {
Result<std::unique_ptr<Session>> Session::Create(Graph graph, const SessionOptions& options) {
  ASSIGN_OR_RETURN(auto session, LocalSession::Create(std::move(graph), options));
  return std::unique_ptr<Session>(std::move(session));
}

Result<std::unique_ptr<Session>> Session::Create(const Scope& scope,
                                                 const SessionOptions& options) {
  RETURN_IF_ERROR(scope.status());
  return Create(scope.graph(), options);
}

Result<std::unique_ptr<LocalSession>> LocalSession::Create(Graph graph,
                                                           const SessionOptions& options) {
  ops::RegisterStandardOps();
  RETURN_IF_ERROR(graph.Validate());
  auto session = std::unique_ptr<LocalSession>(new LocalSession(std::move(graph), options));
  RETURN_IF_ERROR(session->Init());
  return session;
}

Result<std::unique_ptr<LocalSession>> LocalSession::Create(const Scope& scope,
                                                           const SessionOptions& options) {
  RETURN_IF_ERROR(scope.status());
  return Create(scope.graph(), options);
}

LocalSession::~LocalSession() = default;

Status LocalSession::Init() {
  ASSIGN_OR_RETURN(SessionDevices created, CreateSessionDevices(options_));
  devices_ = std::move(created.devices);
  device_set_ = std::move(created.set);
  ASSIGN_OR_RETURN(placement_, PlaceForSession(graph_, device_set_, options_));
  return Status::OK();
}

Result<const PartitionedPlan*> LocalSession::Compile(const Feeds& feeds,
                                                     const std::vector<std::string>& fetches,
                                                     const std::vector<std::string>& targets) {
  return compiled_.GetOrCompile(
      SignatureKey(feeds, fetches, targets), [&]() -> Result<std::unique_ptr<PartitionedPlan>> {
        ASSIGN_OR_RETURN(PlanSpec spec,
                         ResolveRun(graph_, feeds, fetches, targets, options_.plan_memory));
        std::vector<Device*> devices;
        for (auto& d : devices_) devices.push_back(d.get());
        return PartitionedPlan::Compile(
            graph_, placement_.device_of, device_set_, devices, spec,
            {.fuse_epilogues = options_.fuse_epilogues, .plan_memory = options_.plan_memory});
      });
}

Result<const PartitionedPlan*> LocalSession::PlanFor(const Feeds& feeds,
                                                     const std::vector<std::string>& fetches,
                                                     const std::vector<std::string>& targets) {
  RETURN_IF_ERROR(CheckRun(graph_, feeds, fetches, targets).status());
  return Compile(feeds, fetches, targets);
}

Result<const Graph*> LocalSession::PlannedGraph(const Feeds& feeds,
                                                const std::vector<std::string>& fetches,
                                                const std::vector<std::string>& targets) {
  ASSIGN_OR_RETURN(const PartitionedPlan* plan, PlanFor(feeds, fetches, targets));
  return &plan->partition_graph(0);
}

StepStats LocalSession::last_step_stats() const {
  MutexLock lock(mu_);
  return last_step_;
}

int LocalSession::num_plans() const { return compiled_.size(); }

Result<std::vector<Tensor>> LocalSession::Run(const Feeds& feeds,
                                              const std::vector<std::string>& fetches,
                                              const std::vector<std::string>& targets,
                                              const RunOptions& run_options) {
  RETURN_IF_ERROR(CheckRun(graph_, feeds, fetches, targets).status());
  std::vector<Tensor> values;
  values.reserve(feeds.size());
  for (const auto& [name, t] : feeds) values.push_back(t);
  ASSIGN_OR_RETURN(const PartitionedPlan* plan, Compile(feeds, fetches, targets));
  const int64_t step = next_step_.fetch_add(1, std::memory_order_relaxed);
  if (run_options.trace != nullptr) *run_options.trace = StepTrace{.step = step};
  std::vector<std::vector<double>> seconds;
  std::vector<std::vector<NodeSpan>> spans;
  for (auto& d : devices_) d->ResetPeak();
  PartitionedPlan::RunOptions options;
  options.step_id = step;
  options.rendezvous = &rendezvous_;
  options.timeout = run_options.timeout;
  options.cancellation = run_options.cancellation;
  if (run_options.profile) options.node_seconds = &seconds;
  if (run_options.trace != nullptr) options.node_spans = &spans;
  std::vector<Tensor> out;
  Status status = plan->Run(values, &out, options);
  if (run_options.trace != nullptr) {
    for (int i = 0; i < plan->num_partitions(); ++i) {
      AddDeviceTrace(devices_[plan->partition_device(i)]->canonical_name(),
                     plan->partition_graph(i), spans[i], step, run_options.trace);
    }
  }
  {
    MutexLock lock(mu_);
    last_step_ = {};
    for (auto& d : devices_) {
      last_step_.device_peak_bytes.push_back(d->memory().peak);
      last_step_.peak_bytes += last_step_.device_peak_bytes.back();
    }
    last_step_.memory = plan->partition_plan(0).memory_stats();
    if (run_options.profile && status.ok()) {
      for (int i = 0; i < plan->num_partitions(); ++i) {
        AddProfile(devices_[plan->partition_device(i)]->type(), plan->partition_graph(i),
                   seconds[i]);
      }
    }
  }
  RETURN_IF_ERROR(status);
  return out;
}

void LocalSession::AddProfile(const std::string& type, const Graph& graph,
                              const std::vector<double>& seconds) {
  for (int v = 0; v < graph.num_nodes(); ++v) {
    profile_.Add(type, graph.node(v).name(), graph.node(v).op(), seconds[v]);
  }
}

MeasuredCosts LocalSession::MeasuredNodeCosts() const {
  MutexLock lock(mu_);
  return profile_.Means();
}

VariableStore::Variable* LocalSession::FindVariable(int node, bool create) {
  VariableStore* store = devices_[placement_.device_of[node]]->variables();
  const std::string& name = graph_.node(node).name();
  return create ? store->GetOrCreate(name) : store->Find(name);
}

Status LocalSession::SaveCheckpoint(const std::string& path) {
  auto values = SnapshotVariables();
  if (!values.ok()) {
    return values.status().WithPrefix(fmt::format("cannot save checkpoint '{}': ", path));
  }
  return serialization::SaveCheckpoint(*values, path);
}

Result<std::map<std::string, Tensor>> LocalSession::SnapshotVariables() {
  std::map<std::string, Tensor> values;
  for (int v = 0; v < graph_.num_nodes(); ++v) {
    const Node& node = graph_.node(v);
    // A mirror's value is its original's (runtime/checkpoint_check.h): kept once.
    if (node.role() != OpRole::kVariable || MirroredVariable(graph_, node) != nullptr) continue;
    VariableStore::Variable* var = FindVariable(v, false);
    Tensor value;
    if (var != nullptr) {
      MutexLock lock(var->mu);
      value = var->value;
    }
    if (!value.valid()) {
      return FailedPrecondition("variable '{}' is uninitialised; run its initializer first",
                                node.name());
    }
    ASSIGN_OR_RETURN(Tensor host, devices_[placement_.device_of[v]]->CopyToHost(value));
    values.emplace(node.name(), std::move(host));
  }
  return values;
}

Status LocalSession::RestoreCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(auto values, serialization::LoadCheckpoint(path));
  RETURN_IF_ERROR(CheckRestorable(graph_, values, path));
  std::vector<std::pair<int, Tensor>> restore;
  for (int v = 0; v < graph_.num_nodes(); ++v) {
    if (graph_.node(v).role() != OpRole::kVariable) continue;
    ASSIGN_OR_RETURN(Tensor on_device,
                     devices_[placement_.device_of[v]]->CopyFromHost(
                         *RestoredValue(graph_, graph_.node(v), values)));  // checked above
    restore.emplace_back(v, std::move(on_device));
  }
  for (auto& [v, t] : restore) {
    VariableStore::Variable* var = FindVariable(v, true);
    MutexLock lock(var->mu);
    var->value = std::move(t);
  }
  return Status::OK();
}

}  // namespace dflow
