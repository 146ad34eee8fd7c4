#include "distributed/worker_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "distributed/messages.h"
#include "graph/device_name.h"
#include "runtime/calibration.h"
#include "runtime/cpu_device.h"
#include "runtime/pipeline.h"
#include "runtime/step_trace.h"
#include "serialization/graph_file.h"

namespace dflow::distributed {

Result<std::unique_ptr<WorkerService>> WorkerService::Create(transport::UcxTransport* transport,
                                                             WorkerOptions options) {
  if (options.devices.empty()) return InvalidArgument("a worker needs at least one device");
  for (const auto& d : options.devices) {
    ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(d));
    if (name.job || name.task) {
      return InvalidArgument(
          "worker device '{}': give it without job and task (cpu:0); it "
          "takes the task its master assigns",
          d);
    }
  }
  if (options.max_concurrent_steps < 1) {
    return InvalidArgument("max_concurrent_steps is {}; it must be >= 1",
                           options.max_concurrent_steps);
  }
  auto service = std::unique_ptr<WorkerService>(new WorkerService(transport, std::move(options)));
  WorkerService* self = service.get();
  if (self->options_.release_after.count() > 0) {
    self->watcher_ = std::thread([self] { self->Watch(); });
  }
  // A step's start only hands the request to the step pool: it needs no service thread.
  transport->SetCallHandler(
      [self](const transport::UcxTransport::CallInfo& call, std::string payload,
             transport::UcxTransport::Reply reply) {
        self->Handle(call, std::move(payload), std::move(reply));
      },
      {static_cast<uint16_t>(Method::kRunStep)});
  return service;
}

WorkerService::WorkerService(transport::UcxTransport* transport, WorkerOptions options)
    : transport_(transport),
      options_(std::move(options)),
      steps_(std::make_unique<ThreadPool>(options_.max_concurrent_steps, [] {
        pthread_setname_np(pthread_self(), "dflow step");
      })) {}

WorkerService::~WorkerService() {
  transport_->SetCallHandler(nullptr);
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  stop_cv_.NotifyAll();
  if (watcher_.joinable()) watcher_.join();
  steps_.reset();  // waits for running steps
}

int WorkerService::releases() const {
  MutexLock lock(mu_);
  return releases_;
}

void WorkerService::Watch() {
  auto last_seen = std::chrono::steady_clock::now();
  MutexLock lock(mu_);
  while (!stopping_) {
    stop_cv_.WaitFor(mu_, std::chrono::milliseconds(100),
                     [&]() DFLOW_REQUIRES(mu_) { return stopping_; });
    if (stopping_) return;
    bool master = false;
    for (const auto& peer : transport_->peers()) master |= peer.rfind("/job:master/", 0) == 0;
    auto now = std::chrono::steady_clock::now();
    if (master || (signatures_.empty() && devices_.empty())) {
      last_seen = now;
      continue;
    }
    if (now - last_seen < options_.release_after || running_steps_ > 0) continue;
    signatures_.clear();
    devices_.clear();
    devices_json_.clear();
    releases_++;
    std::fprintf(
        stderr, "dflow-worker %s: no master for %lld ms; dropped its graphs and variables\n",
        transport_->task().c_str(), static_cast<long long>(options_.release_after.count()));
  }
}

int WorkerService::num_signatures() const {
  MutexLock lock(mu_);
  return static_cast<int>(signatures_.size());
}

void WorkerService::Handle(const transport::UcxTransport::CallInfo& call, std::string payload,
                           transport::UcxTransport::Reply reply) {
  switch (static_cast<Method>(call.method)) {
    case Method::kGetDevices:
      reply(GetDevices());
      return;
    case Method::kCompile:
      reply(Compile(call.from_task, payload));
      return;
    case Method::kRunStep:
      // On the step pool: a step waits for other tasks, and requests keep being answered.
      steps_->Schedule([this, payload = std::move(payload), reply = std::move(reply)] {
        reply(RunStep(payload));
      });
      return;
    case Method::kRelease:
      reply(Release(payload));
      return;
    case Method::kConnectPeers:
      reply(ConnectPeers(payload));
      return;
    case Method::kReadVariables:
      reply(ReadVariables(payload));
      return;
    case Method::kWriteVariables:
      reply(WriteVariables(payload));
      return;
    case Method::kMeasureLinks:
      reply(MeasureLinks(payload));
      return;
    case Method::kEcho:
      reply(std::string());
      return;
  }
  reply(Unimplemented("worker {} has no method {}", transport_->task(), call.method));
}

Status WorkerService::EnsureDevices() {
  if (!devices_.empty()) return Status::OK();
  std::string task = transport_->task();
  if (task.empty()) return FailedPrecondition("this worker has no task name yet");
  ASSIGN_OR_RETURN(DeviceName t, DeviceName::Parse(task));
  SessionOptions o;
  for (const auto& d : options_.devices) {
    ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(d));
    name.job = t.job;
    name.task = t.task;
    if (!name.index) name.index = 0;
    o.devices.push_back(name.ToString());
  }
  o.device_memory_bytes = options_.memory_limit_bytes;
  o.threads.num_threads = options_.threads;
  // Calibrated below: a local session measures only when it has several devices to choose
  // from, but a worker's devices are always among several, so it measures even one.
  o.calibrate_devices = false;
  ASSIGN_OR_RETURN(SessionDevices made, CreateSessionDevices(o));
  std::optional<CpuCalibration> calibration;
  if (options_.calibrate) {
    ASSIGN_OR_RETURN(ThreadBudget::Split split, o.threads.Resolve());
    const int n = static_cast<int>(o.devices.size());
    ASSIGN_OR_RETURN(calibration, CachedCpuCalibration(std::max(1, split.num_threads / n)));
  }
  nlohmann::json list = nlohmann::json::array();
  for (int i = 0; i < made.set.size(); ++i) {
    DeviceSpec s = made.set.device(i);
    if (calibration && s.type() == "CPU") s = calibration->Apply(s);
    list.push_back({{"name", s.canonical()},
                    {"memory_bytes", s.memory_bytes},
                    {"peak_flops", s.peak_flops},
                    {"memory_bandwidth", s.memory_bandwidth},
                    {"launch_overhead_s", s.launch_overhead_s},
                    {"incarnation", std::to_string(s.incarnation)}});
  }
  LinkSpec link = calibration           ? calibration->same_process
                  : made.set.size() > 1 ? made.set.Link(0, 1)
                                        : LinkSpec{};
  nlohmann::json meta = {{"devices", list},
                         {"same_process_latency_s", link.latency_s},
                         {"same_process_bandwidth", link.bandwidth}};
  devices_json_ = meta.dump();
  devices_ = std::move(made.devices);
  // Large tensors in memfds: a worker of this host reads them where they lie (the transport's
  // tensors by reference) instead of copying them.
  for (auto& d : devices_) {
    if (auto* cpu = dynamic_cast<CpuDevice*>(d.get())) cpu->cpu_allocator()->set_shareable(true);
  }
  return Status::OK();
}

Result<std::string> WorkerService::GetDevices() {
  MutexLock lock(mu_);
  RETURN_IF_ERROR(EnsureDevices());
  Frame f;
  f.meta = nlohmann::json::parse(devices_json_);
  return EncodeFrame(f);
}

Result<std::string> WorkerService::Compile(const std::string& from, std::string_view payload) {
  constexpr std::string_view kWhat = "Compile";
  ASSIGN_OR_RETURN(Frame frame, DecodeFrame(payload, kWhat));
  ASSIGN_OR_RETURN(std::string id, GetString(frame.meta, "signature", kWhat));
  ASSIGN_OR_RETURN(std::vector<std::string> feeds, GetStrings(frame.meta, "feeds", kWhat));
  ASSIGN_OR_RETURN(std::vector<std::string> fetches, GetStrings(frame.meta, "fetches", kWhat));
  ASSIGN_OR_RETURN(int64_t pairs, GetInt(frame.meta, "send_recv_pairs", kWhat));
  auto parts_json = frame.meta.find("partitions");
  if (parts_json == frame.meta.end() || !parts_json->is_array() ||
      parts_json->size() != frame.blobs.size() || frame.blobs.empty()) {
    return InvalidArgument("Compile request: 'partitions' must list one entry per graph blob");
  }
  ASSIGN_OR_RETURN(bool plan_memory, GetBool(frame.meta, "plan_memory", true, kWhat));
  ASSIGN_OR_RETURN(bool fuse, GetBool(frame.meta, "fuse_epilogues", true, kWhat));

  MutexLock lock(mu_);
  RETURN_IF_ERROR(EnsureDevices());
  auto signature = std::make_shared<Signature>();
  signature->feeds = feeds;
  signature->fetches = fetches;
  std::vector<PartitionedPlan::CompiledPart> parts;
  for (size_t i = 0; i < frame.blobs.size(); ++i) {
    const nlohmann::json& pj = (*parts_json)[i];
    if (!pj.is_object())
      return InvalidArgument("Compile request: partition {} is not an object", i);
    ASSIGN_OR_RETURN(std::string device_name, GetString(pj, "device", kWhat));
    ASSIGN_OR_RETURN(std::vector<std::string> part_feeds, GetStrings(pj, "feeds", kWhat));
    ASSIGN_OR_RETURN(std::vector<std::string> part_fetches, GetStrings(pj, "fetches", kWhat));
    ASSIGN_OR_RETURN(std::vector<std::string> part_targets, GetStrings(pj, "targets", kWhat));
    auto parsed = DeviceName::Parse(device_name);
    Device* device = nullptr;
    for (auto& d : devices_) {
      if (parsed.ok() && d->canonical_name() == parsed->ToString()) device = d.get();
    }
    if (device == nullptr) {
      return NotFound("signature {}: worker {} has no device '{}'", id, transport_->task(),
                      device_name);
    }
    std::string source = fmt::format("partition {} of signature {} from {}", i, id, from);
    ASSIGN_OR_RETURN(Graph g, serialization::DecodeGraph(frame.blobs[i], source));
    RETURN_IF_ERROR(g.Validate());
    PlanSpec spec;
    spec.plan_memory = plan_memory;
    PartitionedPlan::CompiledPart part;
    part.device = device;
    for (const auto& name : part_feeds) {
      auto node = g.FindNode(name);
      auto at = std::find(feeds.begin(), feeds.end(), name);
      if (!node || at == feeds.end()) {
        return InvalidArgument("{}: feed '{}' is not a node of it or not a step feed", source,
                               name);
      }
      spec.feeds.push_back(*node);
      part.feeds.push_back(static_cast<int>(at - feeds.begin()));
    }
    for (const auto& name : part_fetches) {
      ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(name));
      auto node = g.FindNode(ref.node);
      auto at = std::find(fetches.begin(), fetches.end(), name);
      if (!node || at == fetches.end() || ref.index >= g.node(*node).num_outputs()) {
        return InvalidArgument("{}: fetch '{}' is not an output of it or not a step fetch", source,
                               name);
      }
      spec.fetches.push_back({*node, ref.index});
      part.fetches.push_back(static_cast<int>(at - fetches.begin()));
    }
    for (const auto& name : part_targets) {
      auto node = g.FindNode(name);
      if (!node) return InvalidArgument("{}: target '{}' is not a node of it", source, name);
      spec.targets.push_back(*node);
    }
    for (int v = 0; v < g.num_nodes(); ++v) {
      if (g.node(v).op() == "_Send") spec.targets.push_back(v);
    }
    auto owned = std::make_shared<const Graph>(std::move(g));
    ASSIGN_OR_RETURN(part.plan,
                     CompileForDevice(std::move(owned), spec, device, {.fuse_epilogues = fuse}));
    signature->devices.push_back(device->canonical_name());
    parts.push_back(std::move(part));
  }
  signature->plan = PartitionedPlan::FromParts(std::move(parts), static_cast<int>(fetches.size()),
                                               static_cast<int>(pairs));
  signatures_[id] = std::move(signature);
  return std::string();
}

Result<std::string> WorkerService::RunStep(std::string_view payload) {
  constexpr std::string_view kWhat = "RunStep";
  ASSIGN_OR_RETURN(Frame frame, DecodeFrame(payload, kWhat));
  ASSIGN_OR_RETURN(std::string id, GetString(frame.meta, "signature", kWhat));
  ASSIGN_OR_RETURN(int64_t step, GetInt(frame.meta, "step", kWhat));
  std::optional<std::chrono::milliseconds> timeout;
  if (frame.meta.contains("timeout_ms")) {
    ASSIGN_OR_RETURN(int64_t ms, GetInt(frame.meta, "timeout_ms", kWhat));
    timeout = std::chrono::milliseconds(ms);
  }
  ASSIGN_OR_RETURN(bool trace, GetBool(frame.meta, "trace", false, kWhat));
  if (frame.blobs.size() != 1) return InvalidArgument("RunStep request: one blob of feeds");
  ASSIGN_OR_RETURN(auto fed, DecodeTensors(frame.blobs[0], "the feeds of a RunStep request"));
  std::shared_ptr<Signature> signature;
  {
    MutexLock lock(mu_);
    auto it = signatures_.find(id);
    if (it == signatures_.end()) {
      return NotFound("worker {} has no compiled signature '{}'", transport_->task(), id);
    }
    signature = it->second;
    running_steps_++;
  }
  struct Done {
    WorkerService* self;
    ~Done() {
      MutexLock lock(self->mu_);
      self->running_steps_--;
    }
  } done{this};
  std::vector<Tensor> feeds;
  for (const auto& name : signature->feeds) {
    auto it = fed.find(name);
    if (it == fed.end()) return InvalidArgument("RunStep request: feed '{}' missing", name);
    feeds.push_back(it->second);
  }
  PartitionedPlan::RunOptions options;
  options.step_id = step;
  options.rendezvous = transport_;
  options.timeout = timeout;
  std::vector<std::vector<NodeSpan>> spans;
  if (trace) options.node_spans = &spans;
  std::vector<Tensor> out;
  RETURN_IF_ERROR(signature->plan->Run(feeds, &out, options));
  std::map<std::string, Tensor> fetched;
  for (size_t i = 0; i < out.size(); ++i) fetched[signature->fetches[i]] = out[i];
  Frame reply;
  reply.blobs.push_back(EncodeTensors(fetched));
  if (trace) {
    // Steady-clock times: comparable with the master's and other workers' on one host.
    StepTrace t;
    for (int i = 0; i < signature->plan->num_partitions(); ++i) {
      AddDeviceTrace(signature->devices[i], signature->plan->partition_graph(i), spans[i], step,
                     &t);
    }
    nlohmann::json devices = nlohmann::json::array();
    for (const DeviceTrace& d : t.devices) {
      nlohmann::json nodes = nlohmann::json::array();
      for (const TracedNode& n : d.nodes) {
        nodes.push_back({n.name, n.op, n.span.start_ns, n.span.end_ns, n.span.thread, n.span.async,
                         n.transfer});
      }
      devices.push_back({{"device", d.device}, {"nodes", std::move(nodes)}});
    }
    reply.meta["trace"] = std::move(devices);
  }
  return EncodeFrame(reply);
}

// Round trips of an empty request give the latency (half the fastest); requests of 4 MiB give
// the bandwidth (the fastest less the round trip). The fastest, since a busy machine only ever
// adds time. The asked task's service thread answers, so the master asks one task at a time.
Result<std::string> WorkerService::MeasureLinks(std::string_view payload) {
  constexpr std::string_view kWhat = "MeasureLinks";
  ASSIGN_OR_RETURN(Frame frame, DecodeFrame(payload, kWhat));
  ASSIGN_OR_RETURN(std::vector<std::string> tasks, GetStrings(frame.meta, "tasks", kWhat));
  constexpr size_t kBig = 4 << 20;
  constexpr auto kTimeout = std::chrono::seconds(10);
  auto time_call = [&](const std::string& task, std::string bytes) -> Result<double> {
    auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(
        transport_->Call(task, static_cast<uint16_t>(Method::kEcho), std::move(bytes), kTimeout)
            .status()
            .WithPrefix(fmt::format("measuring the link to task {}: ", task)));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  Frame out;
  out.meta["links"] = nlohmann::json::array();
  for (const auto& task : tasks) {
    std::vector<double> small, big;
    for (int i = 0; i < 21; ++i) {
      ASSIGN_OR_RETURN(double t, time_call(task, std::string()));
      if (i > 0) small.push_back(t);  // the first warms the path
    }
    for (int i = 0; i < 5; ++i) {
      ASSIGN_OR_RETURN(double t, time_call(task, std::string(kBig, 'x')));
      if (i > 0) big.push_back(t);
    }
    const double rtt = *std::min_element(small.begin(), small.end());
    const double bandwidth = kBig / std::max(*std::min_element(big.begin(), big.end()) - rtt, 1e-6);
    out.meta["links"].push_back({{"task", task}, {"latency_s", rtt / 2}, {"bandwidth", bandwidth}});
  }
  return EncodeFrame(out);
}

Result<std::string> WorkerService::Release(std::string_view payload) {
  ASSIGN_OR_RETURN(Frame frame, DecodeFrame(payload, "Release"));
  ASSIGN_OR_RETURN(std::string id, GetString(frame.meta, "signature", "Release"));
  MutexLock lock(mu_);
  signatures_.erase(id);
  return std::string();
}

Result<std::vector<std::pair<Device*, std::string>>> WorkerService::VariablesOf(
    const Frame& frame, std::string_view what) {
  ASSIGN_OR_RETURN(std::vector<std::string> devices, GetStrings(frame.meta, "devices", what));
  ASSIGN_OR_RETURN(std::vector<std::string> names, GetStrings(frame.meta, "names", what));
  if (devices.size() != names.size()) {
    return InvalidArgument("{} request: {} devices for {} names", what, devices.size(),
                           names.size());
  }
  RETURN_IF_ERROR(EnsureDevices());
  std::vector<std::pair<Device*, std::string>> out;
  for (size_t i = 0; i < names.size(); ++i) {
    Device* device = nullptr;
    for (auto& d : devices_) {
      if (d->canonical_name() == devices[i]) device = d.get();
    }
    if (device == nullptr) {
      return NotFound("worker {} has no device '{}'", transport_->task(), devices[i]);
    }
    out.emplace_back(device, names[i]);
  }
  return out;
}

Result<std::string> WorkerService::ReadVariables(std::string_view payload) {
  ASSIGN_OR_RETURN(Frame frame, DecodeFrame(payload, "ReadVariables"));
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(auto vars, VariablesOf(frame, "ReadVariables"));
  std::map<std::string, Tensor> values;
  for (auto& [device, name] : vars) {
    VariableStore::Variable* var = device->variables()->Find(name);
    Tensor value;
    if (var != nullptr) {
      MutexLock v(var->mu);
      value = var->value;
    }
    if (!value.valid()) {
      return FailedPrecondition("variable '{}' on {} is uninitialised; run its initializer first",
                                name, device->canonical_name());
    }
    ASSIGN_OR_RETURN(Tensor host, device->CopyToHost(value));
    values.emplace(name, std::move(host));
  }
  return EncodeTensors(values);
}

Result<std::string> WorkerService::WriteVariables(std::string_view payload) {
  ASSIGN_OR_RETURN(Frame frame, DecodeFrame(payload, "WriteVariables"));
  if (frame.blobs.size() != 1) return InvalidArgument("WriteVariables request: one blob of values");
  ASSIGN_OR_RETURN(auto values, DecodeTensors(frame.blobs[0], "the values of WriteVariables"));
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(auto vars, VariablesOf(frame, "WriteVariables"));
  std::vector<std::pair<VariableStore::Variable*, Tensor>> set;
  for (auto& [device, name] : vars) {
    auto it = values.find(name);
    if (it == values.end())
      return InvalidArgument("WriteVariables request: no value for '{}'", name);
    ASSIGN_OR_RETURN(Tensor on_device, device->CopyFromHost(it->second));
    set.emplace_back(device->variables()->GetOrCreate(name), std::move(on_device));
  }
  for (auto& [var, value] : set) {
    MutexLock v(var->mu);
    var->value = std::move(value);
  }
  return std::string();
}

Result<std::string> WorkerService::ConnectPeers(std::string_view payload) {
  constexpr std::string_view kWhat = "ConnectPeers";
  ASSIGN_OR_RETURN(Frame frame, DecodeFrame(payload, kWhat));
  ASSIGN_OR_RETURN(std::vector<std::string> tasks, GetStrings(frame.meta, "tasks", kWhat));
  ASSIGN_OR_RETURN(std::vector<std::string> addresses, GetStrings(frame.meta, "addresses", kWhat));
  if (tasks.size() != addresses.size()) {
    return InvalidArgument("ConnectPeers request: {} tasks but {} addresses", tasks.size(),
                           addresses.size());
  }
  const std::string me = transport_->task();
  auto mine = std::find(tasks.begin(), tasks.end(), me);
  if (mine == tasks.end()) {
    return InvalidArgument("ConnectPeers request: this worker ({}) is not in the list", me);
  }
  std::vector<std::string> connected = transport_->peers();
  for (size_t i = static_cast<size_t>(mine - tasks.begin()) + 1; i < tasks.size(); ++i) {
    if (std::find(connected.begin(), connected.end(), tasks[i]) != connected.end()) continue;
    auto peer = transport_->Connect(addresses[i]);
    if (!peer.ok()) return peer.status();
    if (*peer != tasks[i]) {
      return FailedPrecondition("{} at {} answered as {}", tasks[i], addresses[i], *peer);
    }
  }
  return std::string();
}

}  // namespace dflow::distributed
