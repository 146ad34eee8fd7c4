#include "distributed/distributed_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <random>

#include "distributed/messages.h"
#include "graph/device_name.h"
#include "ops/register.h"
#include "placer/partition.h"
#include "runtime/checkpoint_check.h"
#include "runtime/executor.h"
#include "runtime/pipeline.h"
#include "serialization/checkpoint_file.h"
#include "serialization/graph_file.h"

namespace dflow::distributed {
namespace {

constexpr char kMasterTask[] = "/job:master/task:0";
// Beyond a step's own deadline, how long the master waits for a task's answer.
constexpr auto kStepGrace = std::chrono::seconds(5);
// A step run without a timeout still ends on the workers after this.
constexpr auto kDefaultStepTimeout = std::chrono::minutes(30);

// The task's own error, with the task named once.
Status InTask(const std::string& task, const Status& s) {
  if (s.message().find(task) != std::string::npos) return s;
  return Status(s.code(), fmt::format("task {}: {}", task, s.message()));
}

// Adds the devices of a worker's step trace (its RunStep reply's "trace") to `trace`.
Status AddTrace(const nlohmann::json& meta, StepTrace* trace) {
  auto list = meta.find("trace");
  if (list == meta.end() || !list->is_array()) return Internal("no trace in the reply");
  for (const auto& d : *list) {
    ASSIGN_OR_RETURN(std::string device, GetString(d, "device", "RunStep reply"));
    auto nodes = d.find("nodes");
    if (nodes == d.end() || !nodes->is_array()) return Internal("device {} has no nodes", device);
    DeviceTrace& out = trace->devices.emplace_back();
    out.device = device;
    for (const auto& n : *nodes) {
      if (!n.is_array() || n.size() != 7 || !n[0].is_string() || !n[1].is_string() ||
          !n[2].is_number_integer() || !n[3].is_number_integer() || !n[4].is_number_integer() ||
          !n[5].is_boolean() || !n[6].is_string()) {
        return Internal("a malformed node of device {}", device);
      }
      TracedNode& t = out.nodes.emplace_back();
      t.name = n[0].get<std::string>();
      t.op = n[1].get<std::string>();
      t.span = {n[2].get<int64_t>(), n[3].get<int64_t>(), n[4].get<int>(), n[5].get<bool>()};
      t.transfer = n[6].get<std::string>();
    }
  }
  return Status::OK();
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

  transport::UcxTransportOptions t;
  t.task = kMasterTask;
  t.token = cluster.token;
  t.connect_timeout = cluster.connect_timeout;
  ASSIGN_OR_RETURN(s->transport_, transport::UcxTransport::Create(std::move(t)));
  for (const auto& task : s->tasks_) {
    auto named = s->transport_->Connect(task.address, task.name);
    if (!named.ok()) return InTask(task.name, named.status());
  }

  // Devices and figures.
  LinkDefaults links;
  bool calibrated_link = false;
  for (const auto& task : s->tasks_) {
    auto reply = s->transport_->Call(task.name, static_cast<uint16_t>(Method::kGetDevices),
                                     EncodeFrame({}), cluster.request_timeout);
    if (!reply.ok()) return InTask(task.name, reply.status());
    ASSIGN_OR_RETURN(Frame frame, DecodeFrame(*reply, "GetDevices reply"));
    auto list = frame.meta.find("devices");
    if (list == frame.meta.end() || !list->is_array() || list->empty()) {
      return InTask(task.name, Internal("it listed no devices"));
    }
    for (const auto& d : *list) {
      ASSIGN_OR_RETURN(std::string name, GetString(d, "name", "GetDevices reply"));
      ASSIGN_OR_RETURN(std::string incarnation, GetString(d, "incarnation", "GetDevices reply"));
      ASSIGN_OR_RETURN(DeviceName parsed, DeviceName::Parse(name));
      DeviceSpec spec;
      spec.name = parsed;
      spec.host = HostOf(task.address);
      ASSIGN_OR_RETURN(spec.memory_bytes,
                       GetNumber(d, "memory_bytes", spec.memory_bytes, "GetDevices reply"));
      // As in a local session, device_memory_bytes is what the placer plans with (here at most
      // what the worker has).
      if (options.device_memory_bytes > 0) {
        spec.memory_bytes = std::min(spec.memory_bytes, options.device_memory_bytes);
      }
      ASSIGN_OR_RETURN(spec.peak_flops,
                       GetNumber(d, "peak_flops", spec.peak_flops, "GetDevices reply"));
      ASSIGN_OR_RETURN(spec.memory_bandwidth,
                       GetNumber(d, "memory_bandwidth", spec.memory_bandwidth, "GetDevices reply"));
      ASSIGN_OR_RETURN(
          spec.launch_overhead_s,
          GetNumber(d, "launch_overhead_s", spec.launch_overhead_s, "GetDevices reply"));
      auto [end, error] = std::from_chars(
          incarnation.data(), incarnation.data() + incarnation.size(), spec.incarnation);
      if (error != std::errc() || end != incarnation.data() + incarnation.size()) {
        return InTask(task.name,
                      Internal("GetDevices reply: incarnation '{}' is not a number", incarnation));
      }
      if (spec.name.ToString().rfind(task.name + "/", 0) != 0) {
        return InTask(task.name, Internal("it listed device {} of another task", name));
      }
      RETURN_IF_ERROR(s->set_.Add(spec));
    }
    ASSIGN_OR_RETURN(double latency,
                     GetNumber(frame.meta, "same_process_latency_s", 0, "GetDevices reply"));
    ASSIGN_OR_RETURN(double bandwidth,
                     GetNumber(frame.meta, "same_process_bandwidth", 0, "GetDevices reply"));
    if (!calibrated_link && bandwidth > 0) {
      links.same_process = {latency, bandwidth};
      calibrated_link = true;
    }
  }
  s->set_.set_link_defaults(links);

  // Workers connect to each other (the later ones in this list accept).
  Frame peers;
  peers.meta["tasks"] = nlohmann::json::array();
  peers.meta["addresses"] = nlohmann::json::array();
  for (const auto& task : s->tasks_) {
    peers.meta["tasks"].push_back(task.name);
    peers.meta["addresses"].push_back(task.address);
  }
  std::string payload = EncodeFrame(peers);
  for (const auto& task : s->tasks_) {
    auto r = s->transport_->Call(task.name, static_cast<uint16_t>(Method::kConnectPeers), payload,
                                 cluster.request_timeout);
    if (!r.ok()) return InTask(task.name, r.status());
  }

  // Each worker times its links to the others, one worker at a time (links/latency/bandwidth
  // between the devices of two tasks are those of the link between them).
  if (s->tasks_.size() > 1) {
    std::map<std::string, std::vector<int>> devices_of;
    for (int d = 0; d < s->set_.size(); ++d) {
      ASSIGN_OR_RETURN(std::string task, transport::TaskOfDevice(s->set_.device(d).canonical()));
      devices_of[task].push_back(d);
    }
    for (const auto& task : s->tasks_) {
      Frame ask;
      ask.meta["tasks"] = nlohmann::json::array();
      for (const auto& other : s->tasks_) {
        if (other.name != task.name) ask.meta["tasks"].push_back(other.name);
      }
      auto reply = s->transport_->Call(task.name, static_cast<uint16_t>(Method::kMeasureLinks),
                                       EncodeFrame(ask), cluster.request_timeout);
      if (!reply.ok()) return InTask(task.name, reply.status());
      ASSIGN_OR_RETURN(Frame got, DecodeFrame(*reply, "MeasureLinks reply"));
      auto list = got.meta.find("links");
      if (list == got.meta.end() || !list->is_array()) {
        return InTask(task.name, Internal("MeasureLinks reply: no links"));
      }
      for (const auto& l : *list) {
        ASSIGN_OR_RETURN(std::string to, GetString(l, "task", "MeasureLinks reply"));
        MeasuredLink m{task.name, to};
        ASSIGN_OR_RETURN(m.latency_s, GetNumber(l, "latency_s", -1, "MeasureLinks reply"));
        ASSIGN_OR_RETURN(m.bandwidth, GetNumber(l, "bandwidth", 0, "MeasureLinks reply"));
        if (!(m.latency_s >= 0 && m.bandwidth > 0) || !devices_of.count(to)) {
          return InTask(task.name, Internal("MeasureLinks reply: a bad link to '{}'", to));
        }
        for (int a : devices_of[task.name]) {
          for (int b : devices_of[to]) s->set_.SetLink(a, b, {m.latency_s, m.bandwidth, true});
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

int64_t DistributedSession::FirstStepId() {
  std::random_device rd;
  const uint64_t high = ((uint64_t{rd()} << 32) | rd()) % (uint64_t{1} << 30);
  return static_cast<int64_t>(((high + 1) << 32) + 1);
}

DistributedSession::~DistributedSession() {
  if (transport_ == nullptr) return;
  std::vector<std::string> ids;
  {
    MutexLock lock(mu_);
    for (const auto& [key, sig] : signatures_) ids.push_back(sig->id);
  }
  // Best effort: workers also drop a master's state when it goes away.
  for (const auto& id : ids) {
    Frame f;
    f.meta["signature"] = id;
    std::string payload = EncodeFrame(f);
    for (const auto& task : tasks_) {
      (void)transport_->Call(task.name, static_cast<uint16_t>(Method::kRelease), payload,
                             std::chrono::seconds(2));
    }
  }
}

int DistributedSession::num_plans() const {
  MutexLock lock(mu_);
  return static_cast<int>(signatures_.size());
}

Result<std::shared_ptr<const DistributedSession::Signature>> DistributedSession::Compile(
    const Feeds& feeds, const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets) {
  std::string key;
  for (const auto& [name, t] : feeds) key += name + ',';
  key += ';';
  for (const auto& f : fetches) key += f + ',';
  key += ';';
  for (const auto& t : targets) key += t + ',';
  MutexLock lock(mu_);
  if (auto it = signatures_.find(key); it != signatures_.end()) return it->second;

  PlanSpec spec;
  std::vector<std::string> feed_nodes;
  for (const auto& [name, t] : feeds) {
    ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(name));
    spec.feeds.push_back(*graph_.FindNode(ref.node));  // checked by Run
    feed_nodes.push_back(ref.node);
  }
  for (const auto& f : fetches) {
    ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(f));
    auto id = graph_.FindNode(ref.node);
    if (!id) return NotFound("fetch '{}': no node named '{}'", f, ref.node);
    if (ref.index >= graph_.node(*id).num_outputs()) {
      return InvalidArgument("fetch '{}': node '{}' has {} outputs", f, ref.node,
                             graph_.node(*id).num_outputs());
    }
    spec.fetches.push_back({*id, ref.index});
  }
  for (const auto& t : targets) {
    auto id = graph_.FindNode(t);
    if (!id) return NotFound("target '{}': no node named '{}'", t, t);
    spec.targets.push_back(*id);
  }
  ASSIGN_OR_RETURN(std::vector<bool> needed, NeededNodes(graph_, spec));
  ASSIGN_OR_RETURN(PartitionedGraph parts,
                   PartitionGraph(graph_, set_, placement_.device_of, &needed));

  auto sig = std::make_shared<Signature>();
  sig->id = fmt::format("{:x}-{}", transport_->incarnation(), signatures_.size());
  std::map<std::string, Frame> requests;  // by task
  std::map<std::string, TaskPart> by_task;
  for (int i = 0; i < static_cast<int>(parts.partitions.size()); ++i) {
    ASSIGN_OR_RETURN(Graph g, BuildPartitionGraph(graph_, set_, parts, i));
    const DeviceSpec& device = set_.device(parts.partitions[i].device);
    ASSIGN_OR_RETURN(std::string task, transport::TaskOfDevice(device.canonical()));
    TaskPart& part = by_task[task];
    part.task = task;
    nlohmann::json pj = {{"device", device.canonical()},
                         {"feeds", nlohmann::json::array()},
                         {"fetches", nlohmann::json::array()},
                         {"targets", nlohmann::json::array()}};
    for (const auto& node : feed_nodes) {
      if (!g.FindNode(node)) continue;
      pj["feeds"].push_back(node);
      if (std::find(part.feeds.begin(), part.feeds.end(), node) == part.feeds.end()) {
        part.feeds.push_back(node);
      }
    }
    for (const auto& f : fetches) {
      if (!g.FindNode(ParseInputRef(f)->node)) continue;
      pj["fetches"].push_back(f);
      if (std::find(part.fetches.begin(), part.fetches.end(), f) == part.fetches.end()) {
        part.fetches.push_back(f);
      }
    }
    for (const auto& t : targets) {
      if (g.FindNode(t)) pj["targets"].push_back(t);
    }
    Frame& request = requests[task];
    if (!request.meta.contains("partitions")) request.meta["partitions"] = nlohmann::json::array();
    request.meta["partitions"].push_back(pj);
    request.blobs.push_back(serialization::EncodeGraph(g));
  }
  for (auto& [task, request] : requests) {
    const TaskPart& part = by_task[task];
    request.meta["signature"] = sig->id;
    request.meta["feeds"] = part.feeds;
    request.meta["fetches"] = part.fetches;
    request.meta["send_recv_pairs"] = parts.send_recv_pairs;
    request.meta["plan_memory"] = options_.plan_memory;
    request.meta["fuse_epilogues"] = options_.fuse_epilogues;
    auto r = transport_->Call(task, static_cast<uint16_t>(Method::kCompile), EncodeFrame(request),
                              cluster_.request_timeout);
    if (!r.ok()) return InTask(task, r.status());
    sig->parts.push_back(part);
  }
  signatures_[key] = sig;
  return std::shared_ptr<const Signature>(sig);
}

Result<std::vector<Tensor>> DistributedSession::Run(const Feeds& feeds,
                                                    const std::vector<std::string>& fetches,
                                                    const std::vector<std::string>& targets,
                                                    const RunOptions& run_options) {
  if (fetches.empty() && targets.empty()) {
    return InvalidArgument("Run needs at least one fetch or target");
  }
  std::map<std::string, Tensor> by_node;
  for (const auto& [name, value] : feeds) {
    ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(name));
    auto id = graph_.FindNode(ref.node);
    if (!id) return NotFound("feed '{}': no node named '{}'", name, ref.node);
    const Node& n = graph_.node(*id);
    if (n.op() != "Placeholder") {
      return InvalidArgument("feed '{}': node '{}' is a {}, not a Placeholder", name, n.name(),
                             n.op());
    }
    if (!value.valid() || value.dtype() != n.output_dtype(0) ||
        !n.output_shape(0).IsCompatibleWith(value.shape())) {
      return InvalidArgument("feed '{}': placeholder '{}' is {}{}, the fed tensor is {}{}", name,
                             n.name(), n.output_dtype(0), n.output_shape(0), value.dtype(),
                             value.shape());
    }
    if (!by_node.emplace(ref.node, value).second) {
      return InvalidArgument("feed '{}': placeholder fed twice", name);
    }
  }
  ASSIGN_OR_RETURN(auto sig, Compile(feeds, fetches, targets));
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
    Frame f;
    f.meta = {{"signature", sig->id}, {"step", step}, {"timeout_ms", step_timeout.count()}};
    if (trace != nullptr) f.meta["trace"] = true;
    std::map<std::string, Tensor> mine;
    for (const auto& node : part.feeds) {
      auto it = by_node.find(node);
      if (it == by_node.end()) {
        fail(InvalidArgument("placeholder '{}' is needed but not fed", node));
        break;
      }
      mine.emplace(node, it->second);
    }
    if (mine.size() != part.feeds.size()) {
      MutexLock lock(mu);
      --unanswered;
      continue;
    }
    f.blobs.push_back(EncodeTensors(mine));
    transport_->CallAsync(part.task, static_cast<uint16_t>(Method::kRunStep), EncodeFrame(f),
                          step_timeout + kStepGrace, [&, i](Result<std::string> reply) {
                            if (!reply.ok()) {
                              const TaskPart& p = sig->parts[i];
                              fail(reply.status().code() == StatusCode::kUnavailable ||
                                           reply.status().code() == StatusCode::kDeadlineExceeded
                                       ? InTask(p.task, reply.status())
                                       : reply.status());
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
  std::vector<std::map<std::string, Tensor>> results(sig->parts.size());
  if (trace != nullptr) *trace = StepTrace{.step = step - first_step_ + 1};
  for (size_t i = 0; i < sig->parts.size(); ++i) {
    const std::string& task = sig->parts[i].task;
    ASSIGN_OR_RETURN(Frame reply, DecodeFrame(replies[i], "RunStep reply"));
    if (reply.blobs.size() != 1) {
      return InTask(task, Internal("RunStep reply: {} blobs, not 1", reply.blobs.size()));
    }
    ASSIGN_OR_RETURN(results[i], DecodeTensors(reply.blobs[0], "the fetches of task " + task));
    if (trace != nullptr) {
      RETURN_IF_ERROR(
          AddTrace(reply.meta, trace).WithPrefix(fmt::format("the step trace of task {}: ", task)));
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
  std::vector<Tensor> out;
  for (const auto& f : fetches) {
    bool found = false;
    for (size_t i = 0; i < sig->parts.size() && !found; ++i) {
      auto it = results[i].find(f);
      if (it != results[i].end()) {
        out.push_back(it->second);
        found = true;
      }
    }
    if (!found) return Internal("no task returned fetch '{}'", f);
  }
  return out;
}

// The graph's variables grouped by task: the request fields "devices" and "names".
std::map<std::string, Frame> DistributedSession::VariablesByTask() const {
  std::map<std::string, Frame> by_task;
  for (int v = 0; v < graph_.num_nodes(); ++v) {
    const Node& node = graph_.node(v);
    if (node.op() != "Variable") continue;
    const std::string device = set_.device(placement_.device_of[v]).canonical();
    auto task = transport::TaskOfDevice(device);
    if (!task.ok()) continue;
    Frame& f = by_task[*task];
    f.meta["devices"].push_back(device);
    f.meta["names"].push_back(node.name());
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

Result<std::map<std::string, Tensor>> DistributedSession::SnapshotVariables() {
  std::map<std::string, Tensor> values;
  for (auto& [task, request] : VariablesByTask()) {
    auto reply = transport_->Call(task, static_cast<uint16_t>(Method::kReadVariables),
                                  EncodeFrame(request), cluster_.request_timeout);
    if (!reply.ok()) return InTask(task, reply.status());
    // Decoded from the reply: copies no later step changes.
    ASSIGN_OR_RETURN(auto part, DecodeTensors(*reply, "the variables of task " + task));
    values.merge(part);
  }
  return values;
}

Status DistributedSession::RestoreCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(auto values, serialization::LoadCheckpoint(path));
  // Every variable checked before any is set, as in a local session.
  RETURN_IF_ERROR(CheckRestorable(graph_, values, path));
  for (auto& [task, request] : VariablesByTask()) {
    std::map<std::string, Tensor> mine;
    for (const auto& name : request.meta["names"]) {
      mine.emplace(name.get<std::string>(), values.at(name.get<std::string>()));
    }
    request.blobs.push_back(EncodeTensors(mine));
    auto reply = transport_->Call(task, static_cast<uint16_t>(Method::kWriteVariables),
                                  EncodeFrame(request), cluster_.request_timeout);
    if (!reply.ok()) return InTask(task, reply.status());
  }
  return Status::OK();
}

}  // namespace dflow::distributed
