#include "distributed/distributed_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <random>

#include "distributed/messages.h"
#include "graph/device_name.h"
#include "ops/register.h"
#include "partition/partition.h"
#include "runtime/checkpoint_check.h"
#include "runtime/executor.h"
#include "runtime/run_signature.h"
#include "runtime/session_devices.h"
#include "serialization/checkpoint_file.h"
#include "serialization/graph_file.h"

namespace dflow::distributed {
namespace {

// Beyond a step's own deadline, how long the master waits for a task's answer.
constexpr auto kStepGrace = std::chrono::seconds(5);
// A step run without a timeout still ends on the workers after this.
constexpr auto kDefaultStepTimeout = std::chrono::minutes(30);
// A ReadVariables reply's room beyond its chunk: a variable's slice of at least one element
// (when the chunk is smaller) and the message's own framing.
constexpr uint64_t kChunkSlackBytes = 64 << 10;

// The task's own error, with the task named once.
Status InTask(const std::string& task, const Status& s) {
  if (s.message().find(task) != std::string::npos) return s;
  return Status(s.code(), fmt::format("task {}: {}", task, s.message()));
}

std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

Result<std::unique_ptr<DistributedSession>> DistributedSession::Create(
    Graph graph, const SessionOptions& options, const DistributedOptions& cluster) {
  ops::RegisterStandardOps();
  auto s = std::unique_ptr<DistributedSession>(new DistributedSession);
  s->graph_ = std::move(graph);
  RETURN_IF_ERROR(s->graph_.Validate());
  s->options_ = options;
  s->cluster_ = cluster;
  s->tasks_ = cluster.cluster.tasks();
  if (s->tasks_.empty()) return InvalidArgument("the cluster spec has no task");
  if (cluster.cluster.jobs.count("master")) {
    return InvalidArgument("the cluster spec names a job 'master', which is the session's own");
  }

  if (cluster.checkpoint_chunk_bytes < 1) {
    return InvalidArgument("checkpoint_chunk_bytes is {}; it must be at least 1",
                           cluster.checkpoint_chunk_bytes);
  }
  RETURN_IF_ERROR(CheckJobName(cluster.job));
  transport::TransportOptions t;
  t.task = MasterTask();
  t.token = cluster.token;
  t.connect_timeout = cluster.connect_timeout;
  t.peer_timeout = cluster.peer_timeout;
  for (const auto& task : s->tasks_) t.reach.push_back(task.address);
  ASSIGN_OR_RETURN(s->transport_,
                   transport::TransportRegistry::Global().Create(cluster.transport, std::move(t)));
  SetReplyLimits(*s->transport_);
  // A ReadVariables reply holds about one chunk (PlanChunks).
  s->transport_->SetReplyLimit(
      static_cast<uint16_t>(Method::kReadVariables),
      static_cast<uint64_t>(cluster.checkpoint_chunk_bytes) + kChunkSlackBytes);
  for (const auto& task : s->tasks_) {
    auto named = s->transport_->Connect(task.address, task.name);
    if (!named.ok()) return InTask(task.name, named.status());
    Status added = s->names_.Add(task.name, *named);
    if (!added.ok()) return added;
  }

  // Devices and figures.
  LinkDefaults links;
  bool calibrated_link = false;
  for (const auto& task : s->tasks_) {
    auto reply =
        s->transport_->Call(s->names_.Theirs(task.name), static_cast<uint16_t>(Method::kGetDevices),
                            Encode(GetDevicesRequest{cluster.job}), cluster.request_timeout);
    if (!reply.ok()) return s->Failed(task.name, reply.status());
    auto listed = DecodeGetDevicesReply(*reply);
    if (!listed.ok()) return s->Failed(task.name, listed.status());
    for (const DeviceInfo& d : listed->devices) {
      auto parsed = DeviceName::Parse(s->names_.MyDevice(d.name));
      if (!parsed.ok()) return InTask(task.name, parsed.status());
      DeviceSpec spec;
      spec.name = *parsed;
      spec.host = HostOf(task.address);
      spec.memory_bytes = d.memory_bytes;
      // As in a local session, device_memory_bytes is what the placer plans with (here at most
      // what the worker has).
      if (options.device_memory_bytes > 0) {
        spec.memory_bytes = std::min(spec.memory_bytes, options.device_memory_bytes);
      }
      spec.peak_flops = d.peak_flops;
      spec.memory_bandwidth = d.memory_bandwidth;
      spec.launch_overhead_s = d.launch_overhead_s;
      spec.incarnation = d.incarnation;
      if (spec.name.ToString().rfind(task.name + "/", 0) != 0) {
        return InTask(task.name, Internal("it listed device {} of another task", d.name));
      }
      Status added = s->set_.Add(spec);
      if (!added.ok()) return InTask(task.name, added);
      // The same device under the worker's own name, for the graphs it is sent.
      auto theirs = DeviceName::Parse(d.name);
      if (!theirs.ok()) return s->Failed(task.name, theirs.status());
      spec.name = *theirs;
      RETURN_IF_ERROR(s->wire_set_.Add(spec));
    }
    if (!calibrated_link && listed->same_process_bandwidth > 0) {
      links.same_process = {listed->same_process_latency_s, listed->same_process_bandwidth};
      calibrated_link = true;
    }
  }
  s->set_.set_link_defaults(links);
  s->wire_set_.set_link_defaults(links);

  // Workers connect to each other (the later ones in this list accept).
  ConnectPeersRequest peers;
  for (const auto& task : s->tasks_) {
    peers.peers.emplace_back(s->names_.Theirs(task.name), task.address);
  }
  std::string payload = Encode(peers);
  for (const auto& task : s->tasks_) {
    auto r = s->transport_->Call(s->names_.Theirs(task.name),
                                 static_cast<uint16_t>(Method::kConnectPeers), payload,
                                 cluster.request_timeout);
    if (!r.ok()) return s->Failed(task.name, r.status());
  }

  // Each worker times its links to the others, one worker at a time (links/latency/bandwidth
  // between the devices of two tasks are those of the link between them).
  if (s->tasks_.size() > 1) {
    std::map<std::string, std::vector<int>> devices_of;
    for (int d = 0; d < s->set_.size(); ++d) {
      ASSIGN_OR_RETURN(std::string task, TaskOfDevice(s->set_.device(d).canonical()));
      devices_of[task].push_back(d);
    }
    for (const auto& task : s->tasks_) {
      MeasureLinksRequest ask;
      for (const auto& other : s->tasks_) {
        if (other.name != task.name) ask.tasks.push_back(s->names_.Theirs(other.name));
      }
      auto reply = s->transport_->Call(s->names_.Theirs(task.name),
                                       static_cast<uint16_t>(Method::kMeasureLinks), Encode(ask),
                                       cluster.request_timeout);
      if (!reply.ok()) return s->Failed(task.name, reply.status());
      auto got = DecodeMeasureLinksReply(*reply);
      if (!got.ok()) return s->Failed(task.name, got.status());
      for (const MeasuredLinkInfo& l : got->links) {
        const std::string& to = s->names_.Mine(l.task);
        MeasuredLink m{task.name, to, l.latency_s, l.bandwidth};
        if (!(m.latency_s >= 0 && m.bandwidth > 0) || !devices_of.count(to)) {
          return s->Failed(task.name, Internal("MeasureLinks reply: a bad link to '{}'", l.task));
        }
        for (int a : devices_of[task.name]) {
          for (int b : devices_of[to]) {
            s->set_.SetLink(a, b, {m.latency_s, m.bandwidth, true});
            s->wire_set_.SetLink(a, b, {m.latency_s, m.bandwidth, true});
          }
        }
        s->links_.push_back(m);
      }
    }
  }

  SessionOptions place = options;
  place.devices.clear();
  for (const auto& d : s->set_.devices()) place.devices.push_back(d.canonical());
  ASSIGN_OR_RETURN(s->placement_, PlaceForSession(s->graph_, s->set_, place));
  return s;
}

MeasuredCosts DistributedSession::MeasuredNodeCosts() const {
  MutexLock lock(mu_);
  return profile_.Means();
}

Status DistributedSession::Failed(const std::string& task, const Status& s) const {
  return InTask(task, names_.MyStatus(s));
}

std::string DistributedSession::MasterTask() {
  std::random_device rd;
  return fmt::format("/job:master/task:{}", rd() % 1'000'000'000);
}

int64_t DistributedSession::FirstStepId() {
  std::random_device rd;
  const uint64_t high = ((uint64_t{rd()} << 32) | rd()) % (uint64_t{1} << 30);
  return static_cast<int64_t>(((high + 1) << 32) + 1);
}

DistributedSession::~DistributedSession() {
  if (transport_ == nullptr) return;
  // Best effort: workers also drop a job once its masters have gone for their --release-after.
  // A job of this master's own ends with it; a named one keeps its variables for the next
  // master of that name.
  if (cluster_.job.empty()) {
    std::string payload = Encode(ReleaseRequest{"", /*end_job=*/true});
    for (const auto& task : tasks_) {
      (void)transport_->Call(names_.Theirs(task.name), static_cast<uint16_t>(Method::kRelease),
                             payload, std::chrono::seconds(2));
    }
    return;
  }
  for (const Signature* sig : signatures_.Compiled()) {
    std::string payload = Encode(ReleaseRequest{sig->id});
    for (const auto& task : tasks_) {
      (void)transport_->Call(names_.Theirs(task.name), static_cast<uint16_t>(Method::kRelease),
                             payload, std::chrono::seconds(2));
    }
  }
}

int DistributedSession::num_plans() const { return signatures_.size(); }

Result<std::unique_ptr<DistributedSession::Signature>> DistributedSession::Compile(
    const Feeds& feeds, const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets) {
  ASSIGN_OR_RETURN(PlanSpec spec,
                   ResolveRun(graph_, feeds, fetches, targets, options_.plan_memory));
  ASSIGN_OR_RETURN(std::vector<bool> needed, NeededNodes(graph_, spec));
  ASSIGN_OR_RETURN(PartitionedGraph parts,
                   PartitionGraph(graph_, set_, placement_.device_of, &needed));

  auto sig = std::make_unique<Signature>();
  sig->id = fmt::format("{:x}-{}", transport_->incarnation(), next_signature_.fetch_add(1));
  sig->num_fetches = static_cast<int>(spec.fetches.size());
  std::map<std::string, CompileRequest> requests;  // by task
  for (int i = 0; i < static_cast<int>(parts.partitions.size()); ++i) {
    // Under the workers' own names (TaskNames): their devices, their rendezvous keys.
    ASSIGN_OR_RETURN(Graph g, BuildPartitionGraph(graph_, wire_set_, parts, i));
    const DeviceSpec& device = wire_set_.device(parts.partitions[i].device);
    ASSIGN_OR_RETURN(std::string task, TaskOfDevice(device.canonical()));
    CompileRequest& request = requests[task];
    request.partitions.push_back(
        {device.canonical(), serialization::EncodeGraph(g), ShareOf(graph_, spec, g)});
  }
  for (auto& [task, request] : requests) {
    request.signature = sig->id;
    request.num_feeds = static_cast<int>(spec.feeds.size());
    request.num_fetches = sig->num_fetches;
    request.plan_memory = options_.plan_memory;
    request.fuse_epilogues = options_.fuse_epilogues;
    TaskPart part{task, {}};
    for (const auto& p : request.partitions) {
      for (const auto& f : p.share.feeds) {
        if (std::find(part.feeds.begin(), part.feeds.end(), f.index) == part.feeds.end()) {
          part.feeds.push_back(f.index);
        }
      }
    }
    auto r = transport_->Call(task, static_cast<uint16_t>(Method::kCompile), Encode(request),
                              cluster_.request_timeout);
    if (!r.ok()) return Failed(names_.Mine(task), r.status());
    sig->parts.push_back(std::move(part));
  }
  return sig;
}

Result<std::vector<Tensor>> DistributedSession::Run(const Feeds& feeds,
                                                    const std::vector<std::string>& fetches,
                                                    const std::vector<std::string>& targets,
                                                    const RunOptions& run_options) {
  RETURN_IF_ERROR(CheckRun(graph_, feeds, fetches, targets).status());
  ASSIGN_OR_RETURN(const Signature* sig,
                   signatures_.GetOrCompile(SignatureKey(feeds, fetches, targets),
                                            [&] { return Compile(feeds, fetches, targets); }));
  const int64_t step = next_step_.fetch_add(1);
  auto step_timeout = run_options.timeout.value_or(
      std::chrono::duration_cast<std::chrono::milliseconds>(kDefaultStepTimeout));

  // The master's rendezvous of the step: aborting it tells every task.
  ASSIGN_OR_RETURN(auto rendezvous, transport_->Create(step));
  Mutex mu;
  Status first;
  auto fail = [&](const Status& s) {
    {
      MutexLock lock(mu);
      if (!first.ok()) return;
      first = s;
    }
    rendezvous->Abort(s);
  };
  int64_t cancel_id = 0;
  if (run_options.cancellation != nullptr) {
    cancel_id = run_options.cancellation->Register([&](const Status& s) { fail(s); });
  }
  // Every task's request goes out at once; the replies come back on the transport's thread,
  // which records them (an error also aborts the step everywhere) and this thread decodes them.
  std::vector<std::string> replies(sig->parts.size());
  // A profiled step is a traced one: the spans of its nodes are their times.
  StepTrace profiled;
  StepTrace* trace = run_options.trace != nullptr ? run_options.trace
                     : run_options.profile        ? &profiled
                                                  : nullptr;
  CondVar all_answered;
  size_t unanswered = sig->parts.size();
  for (size_t i = 0; i < sig->parts.size(); ++i) {
    const TaskPart& part = sig->parts[i];
    RunStepRequest request{sig->id, step, step_timeout.count(), trace != nullptr, {}};
    for (int f : part.feeds) request.feeds.emplace_back(f, feeds[f].second);
    transport_->CallAsync(part.task, static_cast<uint16_t>(Method::kRunStep), Encode(request),
                          step_timeout + kStepGrace, [&, i](Result<std::string> reply) {
                            if (!reply.ok()) {
                              const std::string& task = names_.Mine(sig->parts[i].task);
                              fail(reply.status().code() == StatusCode::kUnavailable ||
                                           reply.status().code() == StatusCode::kDeadlineExceeded
                                       ? Failed(task, reply.status())
                                       : names_.MyStatus(reply.status()));
                            }
                            MutexLock lock(mu);
                            if (reply.ok()) replies[i] = std::move(reply).value();
                            if (--unanswered == 0) all_answered.NotifyAll();
                          });
  }
  {
    MutexLock lock(mu);
    all_answered.Wait(mu, [&]() DFLOW_REQUIRES(mu) { return unanswered == 0; });
  }
  if (run_options.cancellation != nullptr) run_options.cancellation->Unregister(cancel_id);
  {
    MutexLock lock(mu);
    if (!first.ok()) return first;
  }
  std::vector<Tensor> out(sig->num_fetches);
  if (trace != nullptr) *trace = StepTrace{.step = step - first_step_ + 1};
  for (size_t i = 0; i < sig->parts.size(); ++i) {
    const std::string& task = names_.Mine(sig->parts[i].task);
    auto reply = DecodeRunStepReply(replies[i]);
    if (!reply.ok()) return InTask(task, reply.status());
    for (auto& [index, value] : reply->fetches) {
      if (index >= sig->num_fetches || out[index].valid()) {
        return InTask(task, Internal("RunStep reply: fetch {} is not one it computes", index));
      }
      out[index] = std::move(value);
    }
    if (trace != nullptr) {
      for (DeviceTrace& d : reply->devices) {
        d.device = names_.MyDevice(d.device);
        trace->devices.push_back(std::move(d));
      }
    }
  }
  if (run_options.profile) {
    MutexLock lock(mu_);
    for (const DeviceTrace& d : trace->devices) {
      auto name = DeviceName::Parse(d.device);
      if (!name.ok() || !name->type) continue;  // a worker's nonsense: no time to keep
      for (const TracedNode& n : d.nodes) {
        profile_.Add(*name->type, n.name, n.op,
                     static_cast<double>(n.span.end_ns - n.span.start_ns) * 1e-9);
      }
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].valid()) return Internal("no task returned fetch '{}'", fetches[i]);
  }
  return out;
}

std::map<std::string, VariablesRequest> DistributedSession::VariablesByTask(bool mirrors) const {
  std::map<std::string, VariablesRequest> by_task;
  for (int v = 0; v < graph_.num_nodes(); ++v) {
    const Node& node = graph_.node(v);
    if (node.role() != OpRole::kVariable) continue;
    if (!mirrors && MirroredVariable(graph_, node) != nullptr) continue;
    const std::string device = wire_set_.device(placement_.device_of[v]).canonical();
    auto task = TaskOfDevice(device);
    if (!task.ok()) continue;
    by_task[*task].variables.push_back({device, node.name()});
  }
  return by_task;
}

Status DistributedSession::SaveCheckpoint(const std::string& path) {
  auto values = SnapshotVariables();
  if (!values.ok()) {
    return values.status().WithPrefix(fmt::format("cannot save checkpoint '{}': ", path));
  }
  return serialization::SaveCheckpoint(*values, path);
}

namespace {

// A task's variables in requests whose messages hold about `chunk` bytes at most: whole
// variables together, a larger one in slices (runs of its elements, at least one a slice).
struct ChunkPlan {
  std::vector<std::vector<VariableRef>> requests;
};

// What a variable adds to a message beside its values: its names and the tensor's header.
int64_t RefOverhead(const VariableRef& v) {
  return 256 + static_cast<int64_t>(v.name.size() + v.device.size());
}

// `bytes_of` gives a variable's element size and element count (count -1: not known, sent
// whole as if a chunk).
template <typename F>
ChunkPlan PlanChunks(const std::vector<VariableRef>& refs, int64_t chunk, F bytes_of) {
  ChunkPlan plan;
  int64_t in_request = chunk;  // none open yet
  auto add = [&](VariableRef ref, int64_t bytes) {
    bytes += RefOverhead(ref);
    if (plan.requests.empty() || in_request + bytes > chunk) {
      plan.requests.emplace_back();
      in_request = 0;
    }
    plan.requests.back().push_back(std::move(ref));
    in_request += bytes;
  };
  for (const VariableRef& v : refs) {
    auto [size, count] = bytes_of(v);
    if (count < 0 || size * count + RefOverhead(v) <= chunk) {
      add(v, count < 0 ? chunk : size * count);
      continue;
    }
    const int64_t per_slice = std::max<int64_t>(1, (chunk - RefOverhead(v)) / size);
    for (int64_t offset = 0; offset < count; offset += per_slice) {
      VariableRef slice = v;
      slice.offset = offset;
      slice.count = std::min(per_slice, count - offset);
      const int64_t bytes = slice.count * size;
      add(std::move(slice), bytes);
    }
  }
  return plan;
}

}  // namespace

Result<std::map<std::string, Tensor>> DistributedSession::SnapshotVariables() {
  std::map<std::string, Tensor> values;
  const int64_t chunk = cluster_.checkpoint_chunk_bytes;  // >= 1 (Create)
  // A mirror's value is its original's, read once (runtime/checkpoint_check.h).
  for (auto& [task, request] : VariablesByTask(/*mirrors=*/false)) {
    ChunkPlan plan = PlanChunks(request.variables, chunk, [&](const VariableRef& v) {
      const Node& node = graph_.node(*graph_.FindNode(v.name));
      return std::pair<int64_t, int64_t>{DTypeSize(node.output_dtype(0)),
                                         node.output_shape(0).num_elements()};
    });
    std::map<std::string, Tensor> assembling;  // sliced variables, by name
    for (auto& refs : plan.requests) {
      auto reply = transport_->Call(task, static_cast<uint16_t>(Method::kReadVariables),
                                    Encode(VariablesRequest{refs}), cluster_.request_timeout);
      if (!reply.ok()) return Failed(names_.Mine(task), reply.status());
      // Decoded from the reply: copies no later step changes.
      auto part = DecodeVariableValues(*reply, "ReadVariables reply");
      if (!part.ok()) return InTask(names_.Mine(task), part.status());
      if (part->values.size() != refs.size()) {
        return InTask(names_.Mine(task), Internal("ReadVariables reply: {} values for {} variables",
                                                  part->values.size(), refs.size()));
      }
      for (size_t i = 0; i < refs.size(); ++i) {
        const VariableRef& ref = refs[i];
        Tensor& value = part->values[i];
        if (ref.count < 0) {
          values.emplace(ref.name, std::move(value));
          continue;
        }
        // Slices come as planned: in order, from offset 0.
        if (ref.offset == 0) {
          const Node& node = graph_.node(*graph_.FindNode(ref.name));
          assembling[ref.name] = Tensor(node.output_dtype(0), node.output_shape(0));
        }
        Tensor& full = assembling[ref.name];
        if (value.dtype() != full.dtype() || value.num_elements() != ref.count) {
          return InTask(names_.Mine(task),
                        Internal("ReadVariables reply: variable '{}' at element {}: {} {} "
                                 "elements for a slice of {} {}",
                                 ref.name, ref.offset, value.num_elements(), value.dtype(),
                                 ref.count, full.dtype()));
        }
        std::memcpy(full.Part(ref.offset, Shape{ref.count}).raw_data(), value.raw_data(),
                    value.num_bytes());
        if (ref.offset + ref.count == full.num_elements()) {
          values.emplace(ref.name, std::move(full));
          assembling.erase(ref.name);
        }
      }
    }
  }
  return values;
}

Status DistributedSession::RestoreCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(auto values, serialization::LoadCheckpoint(path));
  // Every variable checked before any is set, as in a local session.
  RETURN_IF_ERROR(CheckRestorable(graph_, values, path));
  // Every mirror takes its original's value (the file holds it once).
  for (int v = 0; v < graph_.num_nodes(); ++v) {
    const Node& node = graph_.node(v);
    if (node.role() == OpRole::kVariable && !values.count(node.name())) {
      values.emplace(node.name(), *RestoredValue(graph_, node, values));  // checked above
    }
  }
  const int64_t chunk = cluster_.checkpoint_chunk_bytes;  // >= 1 (Create)
  for (auto& [task, request] : VariablesByTask(/*mirrors=*/true)) {
    ChunkPlan plan = PlanChunks(request.variables, chunk, [&](const VariableRef& v) {
      const Tensor& t = values.at(v.name);
      return std::pair<int64_t, int64_t>{DTypeSize(t.dtype()), t.num_elements()};
    });
    for (auto& refs : plan.requests) {
      VariableValues write{refs, {}};
      for (VariableRef& v : write.variables) {
        const Tensor& t = values.at(v.name);
        if (v.count < 0) {
          write.values.push_back(t);
          continue;
        }
        if (v.offset == 0) v.dims = t.shape().dim_vector();
        write.values.push_back(t.Part(v.offset, Shape{v.count}));
      }
      auto reply = transport_->Call(task, static_cast<uint16_t>(Method::kWriteVariables),
                                    Encode(write), cluster_.request_timeout);
      if (!reply.ok()) return Failed(names_.Mine(task), reply.status());
    }
  }
  return Status::OK();
}

}  // namespace dflow::distributed
