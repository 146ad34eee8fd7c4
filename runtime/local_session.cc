#include "runtime/local_session.h"

#include <fmt/format.h>

#include <algorithm>

#include "ops/register.h"
#include "runtime/checkpoint_check.h"
#include "runtime/pipeline.h"
#include "serialization/checkpoint_file.h"

namespace dflow {
namespace {

// The cache's key of a run signature: feed, fetch and target names.
std::string SignatureKey(const Session::Feeds& feeds, const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets) {
  std::string key;
  for (const auto& [name, t] : feeds) key += name + ',';
  key += '|';
  for (const auto& f : fetches) key += f + ',';
  key += '|';
  for (const auto& t : targets) key += t + ',';
  return key;
}

}  // namespace

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

Status LocalSession::CheckFeed(const std::string& name, const Tensor& value, int* node) const {
  ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(name));
  auto id = graph_.FindNode(ref.node);
  if (!id) return NotFound("feed '{}': no node named '{}'", name, ref.node);
  const Node& n = graph_.node(*id);
  if (n.op() != "Placeholder") {
    return InvalidArgument(
        "feed '{}': node '{}' is a {}, not a Placeholder; only placeholders "
        "can be fed",
        name, n.name(), n.op());
  }
  if (ref.index != 0) return InvalidArgument("feed '{}': a placeholder has only output 0", name);
  if (!value.valid()) return InvalidArgument("feed '{}': the tensor is empty", name);
  if (value.dtype() != n.output_dtype(0)) {
    return InvalidArgument("feed '{}': placeholder '{}' is {}, the fed tensor is {}", name,
                           n.name(), n.output_dtype(0), value.dtype());
  }
  if (!n.output_shape(0).IsCompatibleWith(value.shape())) {
    return InvalidArgument("feed '{}': placeholder '{}' has shape {}, the fed tensor has shape {}",
                           name, n.name(), n.output_shape(0), value.shape());
  }
  if (!value.host_accessible()) {
    return InvalidArgument("feed '{}': the tensor is in {} memory, not host memory", name,
                           value.device());
  }
  *node = *id;
  return Status::OK();
}

Result<PlanSpec> LocalSession::Spec(const Feeds& feeds, const std::vector<std::string>& fetches,
                                    const std::vector<std::string>& targets) const {
  PlanSpec spec;
  for (const auto& [name, t] : feeds) {
    ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(name));
    auto id = graph_.FindNode(ref.node);
    if (!id) return NotFound("feed '{}': no node named '{}'", name, ref.node);
    spec.feeds.push_back(*id);
  }
  for (const auto& f : fetches) {
    ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(f));
    auto id = graph_.FindNode(ref.node);
    if (!id) return NotFound("fetch '{}': no node named '{}'", f, ref.node);
    const Node& n = graph_.node(*id);
    if (ref.index >= n.num_outputs()) {
      return InvalidArgument("fetch '{}': node '{}' ({}) has {} output{}", f, n.name(), n.op(),
                             n.num_outputs(), n.num_outputs() == 1 ? "" : "s");
    }
    spec.fetches.push_back({*id, ref.index});
  }
  for (const auto& t : targets) {
    auto id = graph_.FindNode(t);
    if (!id) return NotFound("target '{}': no node named '{}'", t, t);
    spec.targets.push_back(*id);
  }
  spec.plan_memory = options_.plan_memory;
  return spec;
}

Result<const PartitionedPlan*> LocalSession::Compile(const Feeds& feeds,
                                                     const std::vector<std::string>& fetches,
                                                     const std::vector<std::string>& targets) {
  std::string key = SignatureKey(feeds, fetches, targets);
  std::shared_ptr<Compiled> entry;
  {
    MutexLock lock(mu_);
    auto& slot = compiled_[key];
    if (!slot) slot = std::make_shared<Compiled>();
    entry = slot;
  }
  // Only runs of this signature wait here while it compiles.
  MutexLock lock(entry->mu);
  if (!entry->done) {
    auto spec = Spec(feeds, fetches, targets);
    if (!spec.ok()) {
      entry->status = spec.status();
    } else {
      std::vector<Device*> devices;
      for (auto& d : devices_) devices.push_back(d.get());
      auto plan = PartitionedPlan::Compile(
          graph_, placement_.device_of, device_set_, devices, *spec,
          {.fuse_epilogues = options_.fuse_epilogues, .plan_memory = options_.plan_memory});
      if (plan.ok()) {
        entry->plan = std::move(plan).value();
      } else {
        entry->status = plan.status();
      }
    }
    entry->done = true;
  }
  if (!entry->status.ok()) {
    // A signature that failed to compile is not kept: the error may depend on the feeds given.
    Status s = entry->status;
    MutexLock session_lock(mu_);
    auto it = compiled_.find(key);
    if (it != compiled_.end() && it->second == entry) compiled_.erase(it);
    return s;
  }
  return entry->plan.get();
}

Result<const PartitionedPlan*> LocalSession::PlanFor(const Feeds& feeds,
                                                     const std::vector<std::string>& fetches,
                                                     const std::vector<std::string>& targets) {
  for (const auto& [name, t] : feeds) {
    int node = -1;
    RETURN_IF_ERROR(CheckFeed(name, t, &node));
  }
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

int LocalSession::num_plans() const {
  MutexLock lock(mu_);
  return static_cast<int>(compiled_.size());
}

Result<std::vector<Tensor>> LocalSession::Run(const Feeds& feeds,
                                              const std::vector<std::string>& fetches,
                                              const std::vector<std::string>& targets,
                                              const RunOptions& run_options) {
  if (fetches.empty() && targets.empty()) {
    return InvalidArgument("Run needs at least one fetch or target");
  }
  std::vector<Tensor> values;
  values.reserve(feeds.size());
  std::vector<int> fed_nodes;
  for (const auto& [name, t] : feeds) {
    int node = -1;
    RETURN_IF_ERROR(CheckFeed(name, t, &node));
    if (std::find(fed_nodes.begin(), fed_nodes.end(), node) != fed_nodes.end()) {
      return InvalidArgument("feed '{}': placeholder fed twice", name);
    }
    fed_nodes.push_back(node);
    values.push_back(t);
  }
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
    if (node.op() != "Variable") continue;
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
    if (graph_.node(v).op() != "Variable") continue;
    ASSIGN_OR_RETURN(Tensor on_device, devices_[placement_.device_of[v]]->CopyFromHost(
                                           values.at(graph_.node(v).name())));
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
