#include "distributed/worker_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include "distributed/messages.h"
#include "graph/device_name.h"
#include "runtime/calibration.h"
#include "runtime/session_devices.h"
#include "runtime/step_trace.h"
#include "serialization/graph_file.h"

namespace dflow::distributed {
namespace {

// A job by its key (WorkerService::jobs_), for messages.
std::string JobName(const std::string& key) {
  if (key.rfind("job ", 0) == 0) return fmt::format("job '{}'", key.substr(4));
  return fmt::format("the job of {}", key.substr(3));
}

}  // namespace

Result<std::unique_ptr<WorkerService>> WorkerService::Create(transport::Transport* transport,
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
  if (options.max_jobs < 1) {
    return InvalidArgument("max_jobs is {}; it must be >= 1", options.max_jobs);
  }
  auto service = std::unique_ptr<WorkerService>(new WorkerService(transport, std::move(options)));
  WorkerService* self = service.get();
  self->watcher_ = std::thread([self] { self->Watch(); });
  // A step's start only hands the request to the step pool: it needs no service thread.
  transport->SetCallHandler(
      [self](const transport::Transport::CallInfo& call, std::string payload,
             transport::Transport::Reply reply) {
        self->Handle(call, std::move(payload), std::move(reply));
      },
      {static_cast<uint16_t>(Method::kRunStep)});
  return service;
}

WorkerService::WorkerService(transport::Transport* transport, WorkerOptions options)
    : transport_(transport),
      options_(std::move(options)),
      // No polling between steps: the next one comes from the transport's thread, which an
      // idle step thread spinning would slow on a small machine (a 33 us step took 90).
      steps_(std::make_unique<StepThreads>("dflow step", nullptr, 0)) {}

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
  MutexLock lock(mu_);
  while (true) {
    stop_cv_.WaitFor(mu_, std::chrono::milliseconds(100),
                     [&]() DFLOW_REQUIRES(mu_) { return stopping_ || !retired_.empty(); });
    if (!retired_.empty()) {
      std::vector<std::shared_ptr<Job>> dropped;
      dropped.swap(retired_);
      lock.Unlock();
      std::vector<SpareDevices> spares;
      for (auto& job : dropped) {
        // A running step may hold its job still: it goes when the step ends. Otherwise its
        // devices, emptied, wait for the next job (their threads and allocator caches warm).
        if (job.use_count() != 1 || job->devices.empty()) continue;
        job->signatures.clear();  // before the variables: compiled kernels point at them
        job->partial_reads.clear();
        job->partial_writes.clear();
        for (auto& d : job->devices) {
          d->variables()->Clear();
          d->ResetPeak();
        }
        spares.push_back({std::move(job->devices), std::move(job->devices_reply),
                          std::chrono::steady_clock::now()});
      }
      dropped.clear();
      lock.Lock();
      for (auto& spare : spares) {
        if (spare_devices_.size() < kSpareDeviceSets) spare_devices_.push_back(std::move(spare));
      }
      lock.Unlock();
      spares.clear();  // past the few kept: freed here, off the lock
      lock.Lock();
    }
    if (stopping_) return;
    if (options_.release_after.count() <= 0) continue;
    // Spare devices unused for release_after go too.
    const auto idle_since = std::chrono::steady_clock::now() - options_.release_after;
    std::erase_if(spare_devices_, [&](const SpareDevices& d) { return d.since < idle_since; });
    std::vector<std::string> peers = transport_->peers();
    std::set<std::string> connected(peers.begin(), peers.end());
    auto now = std::chrono::steady_clock::now();
    std::vector<std::string> gone;
    for (auto& [key, job] : jobs_) {
      bool seen = job->running_steps > 0;
      for (const auto& caller : job->callers) seen |= connected.count(caller) > 0;
      if (seen) {
        job->last_seen = now;
      } else if (now - job->last_seen >= options_.release_after) {
        gone.push_back(key);
      }
    }
    for (const auto& key : gone) {
      std::fprintf(stderr,
                   "dflow-worker %s: %s: no master for %lld ms; dropped its graphs and variables\n",
                   transport_->task().c_str(), jobs_[key]->name.c_str(),
                   static_cast<long long>(options_.release_after.count()));
      DropJob(key);
      releases_++;
    }
  }
}

int WorkerService::num_signatures() const {
  MutexLock lock(mu_);
  int n = 0;
  for (const auto& [key, job] : jobs_) n += static_cast<int>(job->signatures.size());
  return n;
}

int WorkerService::num_jobs() const {
  MutexLock lock(mu_);
  return static_cast<int>(jobs_.size());
}

int WorkerService::num_spare_device_sets() const {
  MutexLock lock(mu_);
  return static_cast<int>(spare_devices_.size());
}

std::string WorkerService::JobKey(const std::string& from) const {
  auto bound = job_of_caller_.find(from);
  return bound != job_of_caller_.end() ? bound->second : "of " + from;
}

Result<std::shared_ptr<WorkerService::Job>> WorkerService::JobOf(const std::string& from) {
  const std::string key = JobKey(from);
  auto it = jobs_.find(key);
  if (it == jobs_.end()) {
    if (static_cast<int>(jobs_.size()) >= options_.max_jobs) {
      return ResourceExhausted(
          "worker {} holds {} jobs, its limit (--max-jobs); {} is refused until one ends",
          transport_->task(), jobs_.size(), JobName(key));
    }
    auto job = std::make_shared<Job>();
    job->name = JobName(key);
    job->last_seen = std::chrono::steady_clock::now();
    it = jobs_.emplace(key, std::move(job)).first;
  }
  it->second->callers.insert(from);
  job_of_caller_[from] = key;
  return it->second;
}

void WorkerService::DropJob(const std::string& key) {
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return;
  for (const auto& caller : it->second->callers) job_of_caller_.erase(caller);
  // Freed by the watcher: freeing a job's devices and variables takes milliseconds (16 ms for
  // the wide MLP's), which the next master's requests, on this service thread, need not wait.
  retired_.push_back(std::move(it->second));
  jobs_.erase(it);
  stop_cv_.NotifyAll();
}

void WorkerService::Handle(const transport::Transport::CallInfo& call, std::string payload,
                           transport::Transport::Reply reply) {
  switch (static_cast<Method>(call.method)) {
    case Method::kGetDevices:
      reply(GetDevices(call.from_task, payload));
      return;
    case Method::kCompile:
      reply(Compile(call.from_task, payload));
      return;
    case Method::kRunStep:
      // On a step thread of its own: a step waits for other tasks, and requests keep being
      // answered.
      if (started_steps_.fetch_add(1, std::memory_order_acq_rel) >= options_.max_concurrent_steps) {
        started_steps_.fetch_sub(1, std::memory_order_acq_rel);
        reply(ResourceExhausted(
            "worker {} runs {} step{} at once, its limit (--max-concurrent-steps); this one is "
            "refused rather than queued behind them",
            transport_->task(), options_.max_concurrent_steps,
            options_.max_concurrent_steps == 1 ? "" : "s"));
        return;
      }
      steps_->Run(
          [this, from = call.from_task, payload = std::move(payload), reply = std::move(reply)] {
            reply(RunStep(from, payload));
            started_steps_.fetch_sub(1, std::memory_order_acq_rel);
          });
      return;
    case Method::kRelease:
      reply(Release(call.from_task, payload));
      return;
    case Method::kConnectPeers:
      reply(ConnectPeers(payload));
      return;
    case Method::kReadVariables:
      reply(ReadVariables(call.from_task, payload));
      return;
    case Method::kWriteVariables:
      reply(WriteVariables(call.from_task, payload));
      return;
    case Method::kMeasureLinks:
      reply(MeasureLinks(payload));
      return;
    case Method::kEcho:
      reply(std::string());
      return;
    case Method::kRegister:
      break;  // a master's rendezvous takes it, not a worker
  }
  reply(Unimplemented("worker {} has no method {}", transport_->task(), call.method));
}

Status WorkerService::EnsureDevices(Job& job) {
  if (!job.devices.empty()) return Status::OK();
  if (!spare_devices_.empty()) {
    job.devices = std::move(spare_devices_.back().devices);
    job.devices_reply = std::move(spare_devices_.back().reply);
    spare_devices_.pop_back();
    return Status::OK();
  }
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
  // Large tensors in memfds: a worker of this host reads them where they lie (the transport's
  // tensors by reference) instead of copying them.
  ASSIGN_OR_RETURN(SessionDevices made, CreateSessionDevices(o, /*shareable_memory=*/true));
  std::optional<CpuCalibration> calibration;
  if (options_.calibrate) {
    ASSIGN_OR_RETURN(ThreadBudget::Split split, o.threads.Resolve());
    const int n = static_cast<int>(o.devices.size());
    ASSIGN_OR_RETURN(calibration, CachedCpuCalibration(std::max(1, split.num_threads / n)));
  }
  GetDevicesReply listed;
  for (int i = 0; i < made.set.size(); ++i) {
    DeviceSpec d = made.set.device(i);
    if (calibration && d.type() == "CPU") d = calibration->Apply(d);
    listed.devices.push_back({d.canonical(), d.incarnation, d.memory_bytes, d.peak_flops,
                              d.memory_bandwidth, d.launch_overhead_s});
  }
  LinkSpec link = calibration           ? calibration->same_process
                  : made.set.size() > 1 ? made.set.Link(0, 1)
                                        : LinkSpec{};
  listed.same_process_latency_s = link.latency_s;
  listed.same_process_bandwidth = link.bandwidth;
  job.devices_reply = Encode(listed);
  job.devices = std::move(made.devices);
  return Status::OK();
}

Result<std::string> WorkerService::GetDevices(const std::string& from, std::string_view payload) {
  ASSIGN_OR_RETURN(GetDevicesRequest request, DecodeGetDevicesRequest(payload));
  MutexLock lock(mu_);
  if (!request.job.empty()) {
    const std::string key = "job " + request.job;
    auto bound = job_of_caller_.find(from);
    if (bound != job_of_caller_.end() && bound->second != key) {
      return FailedPrecondition("{} asked worker {} for job '{}', but its requests are {}'s", from,
                                transport_->task(), request.job, JobName(bound->second));
    }
    job_of_caller_[from] = key;
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Job> job, JobOf(from));
  RETURN_IF_ERROR(EnsureDevices(*job));
  return job->devices_reply;
}

Result<std::string> WorkerService::Compile(const std::string& from, std::string_view payload) {
  ASSIGN_OR_RETURN(CompileRequest request, DecodeCompileRequest(payload));
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<Job> job, JobOf(from));
  RETURN_IF_ERROR(EnsureDevices(*job));
  auto signature = std::make_shared<Signature>();
  signature->num_feeds = request.num_feeds;
  std::vector<PartitionedPlan::Partition> partitions;
  for (size_t i = 0; i < request.partitions.size(); ++i) {
    CompileRequest::Partition& p = request.partitions[i];
    auto parsed = DeviceName::Parse(p.device);
    Device* device = nullptr;
    for (auto& d : job->devices) {
      if (parsed.ok() && d->canonical_name() == parsed->ToString()) device = d.get();
    }
    if (device == nullptr) {
      return NotFound("signature {}: worker {} has no device '{}'", request.signature,
                      transport_->task(), p.device);
    }
    std::string source =
        fmt::format("partition {} of signature {} from {}", i, request.signature, from);
    ASSIGN_OR_RETURN(Graph g, serialization::DecodeGraph(p.graph, source));
    RETURN_IF_ERROR(g.Validate());
    signature->devices.push_back(device->canonical_name());
    partitions.push_back({static_cast<int>(i), device, std::make_shared<const Graph>(std::move(g)),
                          std::move(p.share), std::move(source)});
  }
  ASSIGN_OR_RETURN(
      signature->plan,
      PartitionedPlan::CompilePartitions(
          std::move(partitions), request.num_feeds, request.num_fetches,
          {.fuse_epilogues = request.fuse_epilogues, .plan_memory = request.plan_memory}));
  job->signatures[request.signature] = std::move(signature);
  return std::string();
}

Result<std::string> WorkerService::RunStep(const std::string& from, std::string_view payload) {
  ASSIGN_OR_RETURN(RunStepRequest request, DecodeRunStepRequest(payload));
  std::shared_ptr<Job> job;  // held: its devices outlive the step even if the job is dropped
  std::shared_ptr<Signature> signature;
  {
    MutexLock lock(mu_);
    // Found, not made: a step runs only what its job compiled.
    auto found = jobs_.find(JobKey(from));
    if (found == jobs_.end()) {
      return NotFound("worker {} has no compiled signature '{}': {} has compiled nothing here",
                      transport_->task(), request.signature, from);
    }
    job = found->second;
    auto it = job->signatures.find(request.signature);
    if (it == job->signatures.end()) {
      return NotFound("worker {} has no compiled signature '{}' in {}", transport_->task(),
                      request.signature, job->name);
    }
    signature = it->second;
    job->running_steps++;
  }
  struct Running {
    WorkerService* self;
    Job* job;
    ~Running() {
      MutexLock lock(self->mu_);
      job->running_steps--;
    }
  } running{this, job.get()};
  std::vector<Tensor> feeds(signature->num_feeds);
  for (auto& [index, value] : request.feeds) {
    if (index >= signature->num_feeds || feeds[index].valid()) {
      return InvalidArgument(
          "RunStep request: feed {} is not one of the step's {} feeds, or is "
          "given twice",
          index, signature->num_feeds);
    }
    feeds[index] = std::move(value);
  }
  RETURN_IF_ERROR(signature->plan->CheckFeeds(feeds).WithPrefix("RunStep request: "));
  PartitionedPlan::RunOptions options;
  options.step_id = request.step;
  options.rendezvous = transport_;
  if (request.timeout_ms > 0) options.timeout = std::chrono::milliseconds(request.timeout_ms);
  std::vector<std::vector<NodeSpan>> spans;
  if (request.trace) options.node_spans = &spans;
  std::vector<Tensor> out;
  RETURN_IF_ERROR(signature->plan->Run(feeds, &out, options));
  RunStepReply reply;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].valid()) reply.fetches.emplace_back(static_cast<int>(i), std::move(out[i]));
  }
  if (request.trace) {
    // Steady-clock times: comparable with the master's and other workers' on one host.
    StepTrace t;
    for (int i = 0; i < signature->plan->num_partitions(); ++i) {
      AddDeviceTrace(signature->devices[i], signature->plan->partition_graph(i), spans[i],
                     request.step, &t);
    }
    reply.devices = std::move(t.devices);
  }
  return Encode(reply);
}

// Round trips of an empty request give the latency (half the fastest); requests of 4 MiB give
// the bandwidth (the fastest less the round trip). The fastest, since a busy machine only ever
// adds time. The asked task's service thread answers, so the master asks one task at a time.
Result<std::string> WorkerService::MeasureLinks(std::string_view payload) {
  ASSIGN_OR_RETURN(MeasureLinksRequest request, DecodeMeasureLinksRequest(payload));
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
  MeasureLinksReply out;
  for (const auto& task : request.tasks) {
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
    out.links.push_back({task, rtt / 2, bandwidth});
  }
  return Encode(out);
}

Result<std::string> WorkerService::Release(const std::string& from, std::string_view payload) {
  ASSIGN_OR_RETURN(ReleaseRequest request, DecodeReleaseRequest(payload));
  MutexLock lock(mu_);
  const std::string key = JobKey(from);
  auto job = jobs_.find(key);
  if (job == jobs_.end()) return std::string();  // nothing of its own here
  job->second->signatures.erase(request.signature);
  if (request.end_job) DropJob(key);
  return std::string();
}

Result<std::vector<Device*>> WorkerService::DevicesOf(Job& job,
                                                      const std::vector<VariableRef>& variables) {
  RETURN_IF_ERROR(EnsureDevices(job));
  std::vector<Device*> out;
  for (const VariableRef& v : variables) {
    Device* device = nullptr;
    for (auto& d : job.devices) {
      if (d->canonical_name() == v.device) device = d.get();
    }
    if (device == nullptr) {
      return NotFound("worker {} has no device '{}' (variable '{}')", transport_->task(), v.device,
                      v.name);
    }
    out.push_back(device);
  }
  return out;
}

namespace {

std::string SliceKey(const Device& device, const std::string& name) {
  return device.canonical_name() + "\n" + name;
}

}  // namespace

Result<std::string> WorkerService::ReadVariables(const std::string& from,
                                                 std::string_view payload) {
  ASSIGN_OR_RETURN(VariablesRequest request, DecodeVariablesRequest(payload));
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<Job> job, JobOf(from));
  ASSIGN_OR_RETURN(std::vector<Device*> devices, DevicesOf(*job, request.variables));
  VariableValues reply;
  for (size_t i = 0; i < devices.size(); ++i) {
    const VariableRef& ref = request.variables[i];
    const std::string key = SliceKey(*devices[i], ref.name);
    // A variable read in slices is copied once, at its first slice, and its later slices come
    // from that copy: a step between two slices cannot tear it.
    auto partial = job->partial_reads.find(key);
    if (ref.count < 0 || ref.offset == 0) {
      if (partial != job->partial_reads.end()) job->partial_reads.erase(partial);
      partial = job->partial_reads.end();
      VariableStore::Variable* var = devices[i]->variables()->Find(ref.name);
      Tensor value;
      if (var != nullptr) {
        MutexLock v(var->mu);
        value = var->value;
      }
      if (!value.valid()) {
        return FailedPrecondition("variable '{}' on {} is uninitialised; run its initializer first",
                                  ref.name, devices[i]->canonical_name());
      }
      ASSIGN_OR_RETURN(Tensor host, devices[i]->CopyToHost(value));
      if (ref.count < 0) {
        reply.variables.push_back({"", ref.name});
        reply.values.push_back(std::move(host));
        continue;
      }
      partial = job->partial_reads.emplace(key, PartialVariable{std::move(host), 0}).first;
    }
    if (partial == job->partial_reads.end() || partial->second.next != ref.offset) {
      return FailedPrecondition(
          "ReadVariables: the slice at element {} of variable '{}' on {} is out of order "
          "(expected element {})",
          ref.offset, ref.name, devices[i]->canonical_name(),
          partial == job->partial_reads.end() ? 0 : partial->second.next);
    }
    const Tensor& full = partial->second.value;
    const int64_t n = full.num_elements();
    if (ref.count > n - ref.offset) {
      return InvalidArgument("ReadVariables: slice [{}, {}) of variable '{}' on {}, which has {}",
                             ref.offset, ref.offset + ref.count, ref.name,
                             devices[i]->canonical_name(), n);
    }
    reply.variables.push_back({"", ref.name, ref.offset, ref.count, {}});
    reply.values.push_back(full.Part(ref.offset, Shape{ref.count}));
    partial->second.next += ref.count;
    if (partial->second.next == n) job->partial_reads.erase(partial);
  }
  return Encode(reply);
}

Result<std::string> WorkerService::WriteVariables(const std::string& from,
                                                  std::string_view payload) {
  ASSIGN_OR_RETURN(VariableValues request, DecodeVariableValues(payload, "WriteVariables request"));
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<Job> job, JobOf(from));
  ASSIGN_OR_RETURN(std::vector<Device*> devices, DevicesOf(*job, request.variables));
  // Whole variables and the last slices of sliced ones, set together once all are checked.
  std::vector<std::pair<Device*, std::pair<std::string, Tensor>>> complete;
  for (size_t i = 0; i < devices.size(); ++i) {
    const VariableRef& ref = request.variables[i];
    Tensor& value = request.values[i];
    if (ref.count < 0) {
      complete.push_back({devices[i], {ref.name, std::move(value)}});
      continue;
    }
    const std::string where =
        fmt::format("WriteVariables: variable '{}' on {}", ref.name, devices[i]->canonical_name());
    const std::string key = SliceKey(*devices[i], ref.name);
    auto partial = job->partial_writes.find(key);
    if (ref.offset == 0) {
      // The whole variable, assembled here: its size is checked against the device's limit
      // before it is allocated.
      auto shape = Shape::Make(ref.dims);
      double elements = 1;
      for (int64_t d : ref.dims) elements *= static_cast<double>(d);
      if (!shape.ok() || !shape->fully_defined() || elements > 0x1p52) {
        return InvalidArgument("{}: its first slice gives no valid dims", where);
      }
      const size_t limit = devices[i]->memory().limit;
      const double bytes = elements * DTypeSize(value.dtype());
      if (limit > 0 && bytes > static_cast<double>(limit)) {
        return ResourceExhausted("{}: {} bytes, more than the device's limit of {}", where, bytes,
                                 limit);
      }
      if (partial != job->partial_writes.end()) job->partial_writes.erase(partial);
      partial =
          job->partial_writes.emplace(key, PartialVariable{Tensor(value.dtype(), *shape), 0}).first;
    }
    if (partial == job->partial_writes.end() || partial->second.next != ref.offset) {
      return FailedPrecondition("{}: the slice at element {} is out of order (expected {})", where,
                                ref.offset,
                                partial == job->partial_writes.end() ? 0 : partial->second.next);
    }
    Tensor& full = partial->second.value;
    if (value.dtype() != full.dtype() || value.num_elements() != ref.count ||
        ref.count > full.num_elements() - ref.offset) {
      return InvalidArgument("{}: a slice of {} {} elements at {} does not fit its {} {}", where,
                             value.num_elements(), value.dtype(), ref.offset, full.dtype(),
                             full.shape());
    }
    if (ref.count > 0) {
      std::memcpy(full.Part(ref.offset, Shape{ref.count}).raw_data(), value.raw_data(),
                  value.num_bytes());
    }
    partial->second.next += ref.count;
    if (partial->second.next == full.num_elements()) {
      complete.push_back({devices[i], {ref.name, std::move(full)}});
      job->partial_writes.erase(partial);
    }
  }
  std::vector<std::pair<VariableStore::Variable*, Tensor>> set;
  for (auto& [device, entry] : complete) {
    ASSIGN_OR_RETURN(Tensor on_device, device->CopyFromHost(entry.second));
    set.emplace_back(device->variables()->GetOrCreate(entry.first), std::move(on_device));
  }
  for (auto& [var, value] : set) {
    MutexLock v(var->mu);
    var->value = std::move(value);
  }
  return std::string();
}

Result<std::string> WorkerService::ConnectPeers(std::string_view payload) {
  ASSIGN_OR_RETURN(ConnectPeersRequest request, DecodeConnectPeersRequest(payload));
  std::vector<std::string> tasks, addresses;
  for (auto& [task, address] : request.peers) {
    tasks.push_back(task);
    addresses.push_back(address);
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
