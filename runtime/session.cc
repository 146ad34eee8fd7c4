#include "runtime/session.h"

#include "ops/fusion.h"
#include "ops/register.h"
#include "ops/rendezvous.h"
#include "runtime/calibration.h"
#include "serialization/checkpoint_file.h"

namespace dflow {

namespace {

// The plan cache's key of a run signature: feed, fetch and target names.
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

// Devices "cpu:0".."cpu:N-1" sharing the thread budget equally, and the graph placed on them.
Status CreateMultiDevice(const Graph& graph, const SessionOptions& options,
                         std::vector<std::unique_ptr<CpuDevice>>* cpus, DeviceSet* set,
                         PlacementReport* placement) {
  int n = static_cast<int>(options.devices.size());
  ASSIGN_OR_RETURN(auto split, options.threads.Resolve());
  ThreadBudget each{std::max(1, split.num_threads / n), 1};
  DeviceSpec spec;
  if (options.device_memory_bytes > 0) spec.memory_bytes = options.device_memory_bytes;
  LinkDefaults links;
  if (options.calibrate_devices && n > 1) {
    ASSIGN_OR_RETURN(CpuCalibration c, CachedCpuCalibration(each.num_threads));
    spec = c.Apply(spec);
    links.same_process = c.same_process;
  }
  ASSIGN_OR_RETURN(DeviceSet local, DeviceSet::LocalCpus(n, spec));
  *set = DeviceSet();
  set->set_link_defaults(links);
  for (int i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(DeviceName want, DeviceName::Parse(options.devices[i]));
    if (!(want.WithDefaults() == local.device(i).name)) {
      return InvalidArgument("session devices must be cpu:0 .. cpu:{} in order; device {} is '{}'",
                             n - 1, i, options.devices[i]);
    }
    DeviceSpec device = local.device(i);
    auto given = options.device_specs.find(options.devices[i]);
    if (given != options.device_specs.end()) {
      DeviceName name = device.name;
      device = given->second;
      device.name = name;
    }
    RETURN_IF_ERROR(set->Add(device));
  }
  for (const auto& [name, s] : options.device_specs) {
    if (std::find(options.devices.begin(), options.devices.end(), name) == options.devices.end()) {
      return InvalidArgument("device_specs names '{}', which is not among the session's devices",
                             name);
    }
  }
  for (int i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(auto cpu, CpuDevice::Create(set->device(i).name, each));
    cpus->push_back(std::move(cpu));
  }
  PlacerOptions placer = options.placer;
  MeasuredCosts measured;
  if (!options.cost_file.empty()) {
    ASSIGN_OR_RETURN(measured, MeasuredCosts::Load(options.cost_file));
    placer.costs.measured = &measured;
  }
  placer.log_placement = placer.log_placement || options.log_placement;
  ASSIGN_OR_RETURN(*placement, Place(graph, *set, placer));
  if (options.log_placement) {
    fmt::print(stderr, "placement: {}\n", placement->Summary(*set));
    for (const auto& line : placement->log) fmt::print(stderr, "  {}\n", line);
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<Session>> Session::Create(Graph graph, const SessionOptions& options) {
  ops::RegisterStandardOps();
  RETURN_IF_ERROR(graph.Validate());
  if (!options.devices.empty()) {
    std::vector<std::unique_ptr<CpuDevice>> cpus;
    DeviceSet set;
    PlacementReport placement;
    RETURN_IF_ERROR(CreateMultiDevice(graph, options, &cpus, &set, &placement));
    auto session =
        std::unique_ptr<Session>(new Session(std::move(graph), std::move(cpus), options));
    session->device_set_ = std::move(set);
    session->placement_ = std::move(placement);
    return session;
  }
  ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(options.device));
  name = name.WithDefaults();
  if (!name.index) name.index = 0;
  if (name.type != "CPU") {
    return FailedPrecondition(
        "session device '{}' is not a CPU device; CPU is the only device "
        "type a session runs on so far",
        options.device);
  }
  ASSIGN_OR_RETURN(auto device, CpuDevice::Create(name, options.threads));
  for (int i = 0; i < graph.num_nodes(); ++i) {
    const Node& n = graph.node(i);
    if (n.requested_device().empty()) continue;
    ASSIGN_OR_RETURN(DeviceName want, DeviceName::Parse(n.requested_device()));
    if (!want.Matches(device->name())) {
      return FailedPrecondition("node '{}' requests device '{}', but this session has only {}",
                                n.name(), n.requested_device(), device->canonical_name());
    }
  }
  std::vector<std::unique_ptr<CpuDevice>> devices;
  devices.push_back(std::move(device));
  return std::unique_ptr<Session>(new Session(std::move(graph), std::move(devices), options));
}

Result<std::unique_ptr<Session>> Session::Create(const Scope& scope,
                                                 const SessionOptions& options) {
  RETURN_IF_ERROR(scope.status());
  return Create(scope.graph(), options);
}

Result<const Graph*> Session::PlannedGraph(const Feeds& feeds,
                                           const std::vector<std::string>& fetches,
                                           const std::vector<std::string>& targets) {
  for (const auto& [name, t] : feeds) {
    int node = -1;
    RETURN_IF_ERROR(CheckFeed(name, t, &node));
  }
  ASSIGN_OR_RETURN(const ExecutionPlan* plan, GetPlan(feeds, fetches, targets));
  return &plan->graph();
}

StepStats Session::last_step_stats() const {
  std::lock_guard lock(mu_);
  return last_step_;
}

int Session::num_plans() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(plans_.size());
}

Status Session::CheckFeed(const std::string& name, const Tensor& value, int* node) const {
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

Result<PlanSpec> Session::Spec(const Feeds& feeds, const std::vector<std::string>& fetches,
                               const std::vector<std::string>& targets) const {
  PlanSpec spec;
  for (const auto& [name, t] : feeds) {
    auto ref = ParseInputRef(name);
    if (!ref.ok()) return ref.status();
    spec.feeds.push_back(*graph_.FindNode(ref->node));  // checked by CheckFeed
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

Result<const ExecutionPlan*> Session::GetPlan(const Feeds& feeds,
                                              const std::vector<std::string>& fetches,
                                              const std::vector<std::string>& targets) {
  std::string key = SignatureKey(feeds, fetches, targets);

  std::lock_guard lock(mu_);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  ASSIGN_OR_RETURN(PlanSpec spec, Spec(feeds, fetches, targets));
  std::unique_ptr<ExecutionPlan> plan;
  if (options_.fuse_epilogues) {
    std::vector<int> keep = spec.feeds;
    keep.insert(keep.end(), spec.targets.begin(), spec.targets.end());
    for (const auto& e : spec.fetches) keep.push_back(e.node);
    ASSIGN_OR_RETURN(ops::FusedGraph fused, ops::FuseEpilogues(graph_, keep));
    auto rewritten = std::make_shared<const Graph>(std::move(fused.graph));
    // Fed, fetched and target nodes keep their names; find their ids in the rewritten graph.
    auto remap = [&](int& id) { id = *rewritten->FindNode(graph_.node(id).name()); };
    for (int& f : spec.feeds) remap(f);
    for (int& t : spec.targets) remap(t);
    for (auto& e : spec.fetches) remap(e.node);
    ASSIGN_OR_RETURN(plan, ExecutionPlan::Compile(std::move(rewritten), spec, devices_[0].get()));
  } else {
    ASSIGN_OR_RETURN(plan, ExecutionPlan::Compile(graph_, spec, devices_[0].get()));
  }
  const ExecutionPlan* p = plan.get();
  plans_.emplace(std::move(key), std::move(plan));
  return p;
}

Result<std::vector<Tensor>> Session::Run(const Feeds& feeds,
                                         const std::vector<std::string>& fetches,
                                         const std::vector<std::string>& targets) {
  return Run(feeds, fetches, targets, RunOptions{});
}

Result<const PartitionedPlan*> Session::PartitionedPlanFor(
    const Feeds& feeds, const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets) {
  if (!multi_device()) return FailedPrecondition("this session runs on one device");
  std::string key = SignatureKey(feeds, fetches, targets);
  std::lock_guard lock(mu_);
  auto it = partitioned_.find(key);
  if (it != partitioned_.end()) return it->second.get();
  ASSIGN_OR_RETURN(PlanSpec spec, Spec(feeds, fetches, targets));
  std::vector<Device*> devices;
  for (auto& d : devices_) devices.push_back(d.get());
  ASSIGN_OR_RETURN(
      auto plan, PartitionedPlan::Compile(graph_, placement_.device_of, device_set_, devices, spec,
                                          {.fuse_epilogues = options_.fuse_epilogues,
                                           .plan_memory = options_.plan_memory}));
  const PartitionedPlan* p = plan.get();
  partitioned_.emplace(std::move(key), std::move(plan));
  return p;
}

Result<std::vector<Tensor>> Session::Run(const Feeds& feeds,
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
    for (int other : fed_nodes) {
      if (other == node) return InvalidArgument("feed '{}': placeholder fed twice", name);
    }
    fed_nodes.push_back(node);
    values.push_back(t);
  }
  std::vector<Tensor> out;
  const int64_t step = runs_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (run_options.trace != nullptr) *run_options.trace = StepTrace{.step = step};
  if (multi_device()) {
    ASSIGN_OR_RETURN(const PartitionedPlan* plan, PartitionedPlanFor(feeds, fetches, targets));
    std::vector<std::vector<double>> seconds;
    std::vector<std::vector<NodeSpan>> spans;
    for (auto& d : devices_) d->cpu_allocator()->ResetPeak();
    Status status =
        plan->Run(values, &out, run_options.timeout, run_options.profile ? &seconds : nullptr,
                  run_options.trace != nullptr ? &spans : nullptr);
    if (run_options.trace != nullptr) {
      for (int i = 0; i < plan->num_partitions(); ++i) {
        AddTrace(device_set_.device(plan->partition_device(i)).canonical(),
                 plan->partition_graph(i), spans[i], run_options.trace);
      }
    }
    {
      std::lock_guard lock(mu_);
      last_step_ = {};
      for (auto& d : devices_) {
        last_step_.device_peak_bytes.push_back(d->cpu_allocator()->peak_bytes());
        last_step_.peak_bytes += last_step_.device_peak_bytes.back();
      }
    }
    RETURN_IF_ERROR(status);
    if (run_options.profile) {
      std::lock_guard lock(mu_);
      for (int i = 0; i < plan->num_partitions(); ++i) {
        AddProfile(device_set_.device(plan->partition_device(i)).type(), plan->partition_graph(i),
                   seconds[i]);
      }
    }
    return out;
  }
  ASSIGN_OR_RETURN(const ExecutionPlan* plan, GetPlan(feeds, fetches, targets));
  CpuAllocator* memory = devices_[0]->cpu_allocator();
  memory->ResetPeak();
  std::vector<double> seconds;
  std::vector<NodeSpan> spans;
  ExecutionPlan::RunOptions options;
  if (run_options.profile) {
    seconds.assign(plan->graph().num_nodes(), 0);
    options.node_seconds = &seconds;
  }
  if (run_options.trace != nullptr) {
    spans.assign(plan->graph().num_nodes(), NodeSpan{});
    options.node_spans = &spans;
  }
  Status status = plan->Run(values, &out, options);
  if (run_options.trace != nullptr) {
    AddTrace(devices_[0]->canonical_name(), plan->graph(), spans, run_options.trace);
  }
  {
    std::lock_guard lock(mu_);
    last_step_.peak_bytes = memory->peak_bytes();
    last_step_.memory = plan->memory_stats();
    if (run_options.profile && status.ok()) {
      AddProfile(devices_[0]->type(), plan->graph(), seconds);
    }
  }
  RETURN_IF_ERROR(status);
  return out;
}

void Session::AddTrace(const std::string& device, const Graph& graph,
                       const std::vector<NodeSpan>& spans, StepTrace* trace) {
  DeviceTrace& d = trace->devices.emplace_back();
  d.device = device;
  for (int v = 0; v < graph.num_nodes(); ++v) {
    if (spans[v].start_ns < 0) continue;
    const Node& node = graph.node(v);
    TracedNode& t = d.nodes.emplace_back();
    t.name = node.name();
    t.op = node.op();
    t.span = spans[v];
    if (t.op == "_Send" || t.op == "_Recv") t.transfer = RendezvousKeyOf(node, trace->step);
  }
}

void Session::AddProfile(const std::string& type, const Graph& graph,
                         const std::vector<double>& seconds) {
  auto& nodes = profile_[type];
  for (int v = 0; v < graph.num_nodes(); ++v) {
    const std::string& op = graph.node(v).op();
    if (op == "_Send" || op == "_Recv") continue;  // transfers: the cost model's links
    auto& [total, runs] = nodes[graph.node(v).name()];
    total += seconds[v];
    ++runs;
  }
}

MeasuredCosts Session::MeasuredNodeCosts() const {
  std::lock_guard lock(mu_);
  MeasuredCosts out;
  for (const auto& [type, nodes] : profile_) {
    for (const auto& [name, entry] : nodes) out.seconds[type][name] = entry.first / entry.second;
  }
  return out;
}

Status Session::SaveCheckpoint(const std::string& path) {
  std::map<std::string, Tensor> values;
  for (int v = 0; v < graph_.num_nodes(); ++v) {
    const Node& node = graph_.node(v);
    if (node.op() != "Variable") continue;
    int d = multi_device() ? placement_.device_of[v] : 0;
    VariableStore::Variable* var = devices_[d]->variables()->Find(node.name());
    Tensor value;
    if (var != nullptr) {
      std::lock_guard lock(var->mu);
      value = var->value;
    }
    if (!value.valid()) {
      return FailedPrecondition(
          "cannot save checkpoint '{}': variable '{}' is uninitialised; run its initializer first",
          path, node.name());
    }
    values.emplace(node.name(), std::move(value));
  }
  return serialization::SaveCheckpoint(values, path);
}

Status Session::RestoreCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(auto values, serialization::LoadCheckpoint(path));
  std::vector<std::pair<int, Tensor*>> restore;
  for (int v = 0; v < graph_.num_nodes(); ++v) {
    const Node& node = graph_.node(v);
    if (node.op() != "Variable") continue;
    auto it = values.find(node.name());
    if (it == values.end()) {
      return NotFound("checkpoint '{}' has no variable '{}'", path, node.name());
    }
    const Tensor& t = it->second;
    if (t.dtype() != node.output_dtype(0) || !node.output_shape(0).IsCompatibleWith(t.shape())) {
      return InvalidArgument(
          "checkpoint '{}': variable '{}' is {}{} in the file but {}{} in the graph", path,
          node.name(), DTypeName(t.dtype()), t.shape(), DTypeName(node.output_dtype(0)),
          node.output_shape(0));
    }
    restore.emplace_back(v, &it->second);
  }
  for (auto& [v, t] : restore) {
    int d = multi_device() ? placement_.device_of[v] : 0;
    VariableStore::Variable* var = devices_[d]->variables()->GetOrCreate(graph_.node(v).name());
    std::lock_guard lock(var->mu);
    var->value = std::move(*t);
  }
  return Status::OK();
}

}  // namespace dflow
