#include "runtime/pipeline.h"

#include <algorithm>
#include <map>

#include "ops/fusion.h"
#include "runtime/calibration.h"
#include "runtime/cuda_calibration.h"
#include "runtime/cuda_device.h"
#include "runtime/device_factory.h"

namespace dflow {
namespace {

// The fused copy of `graph` and `spec` remapped onto it, or null when nothing is rewritten.
Result<std::shared_ptr<const Graph>> Rewrite(const Graph& graph, PlanSpec* spec,
                                             const std::string& device_type,
                                             const CompileOptions& options) {
  if (!options.fuse_epilogues) return std::shared_ptr<const Graph>();
  std::vector<int> keep = spec->feeds;
  keep.insert(keep.end(), spec->targets.begin(), spec->targets.end());
  for (const auto& e : spec->fetches) keep.push_back(e.node);
  ASSIGN_OR_RETURN(ops::FusedGraph fused,
                   ops::FuseEpilogues(graph, keep, [&device_type](const char* op) {
                     return KernelRegistry::Global().Find(op, device_type) != nullptr;
                   }));
  auto rewritten = std::make_shared<const Graph>(std::move(fused.graph));
  // Fed, fetched and target nodes keep their names; find their ids in the rewritten graph.
  auto remap = [&](int& id) { id = *rewritten->FindNode(graph.node(id).name()); };
  for (int& f : spec->feeds) remap(f);
  for (int& t : spec->targets) remap(t);
  for (auto& e : spec->fetches) remap(e.node);
  return rewritten;
}

// The links of a session's GPUs from their calibrations: host memory to and from each GPU (for
// every CPU device of the session) and GPU to GPU. Links the user's device_specs name are left
// to the defaults.
Status SetGpuLinks(SessionDevices& out, const std::map<std::string, const DeviceSpec*>& given) {
  for (size_t g = 0; g < out.devices.size(); ++g) {
    auto* gpu = dynamic_cast<CudaDevice*>(out.devices[g].get());
    if (gpu == nullptr || given.count(gpu->canonical_name()) > 0) continue;
    ASSIGN_OR_RETURN(CudaCalibration c, CachedCudaCalibration(gpu->ordinal()));
    for (size_t o = 0; o < out.devices.size(); ++o) {
      if (o == g) continue;
      const int from = static_cast<int>(o), to = static_cast<int>(g);
      if (auto* peer = dynamic_cast<CudaDevice*>(out.devices[o].get())) {
        const size_t p = static_cast<size_t>(peer->ordinal());
        if (p < c.to_peer.size() && c.to_peer[p].bandwidth > 0) {
          out.set.SetLink(to, from, c.to_peer[p]);
        }
      } else if (out.devices[o]->allocator()->host_accessible()) {
        out.set.SetLink(from, to, c.host_to_device);
        out.set.SetLink(to, from, c.device_to_host);
      }
    }
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<ExecutionPlan>> CompileForDevice(std::shared_ptr<const Graph> graph,
                                                        const PlanSpec& spec, Device* device,
                                                        const CompileOptions& options) {
  PlanSpec local = spec;
  ASSIGN_OR_RETURN(auto rewritten, Rewrite(*graph, &local, device->type(), options));
  return ExecutionPlan::Compile(rewritten ? std::move(rewritten) : std::move(graph), local, device);
}

Result<std::unique_ptr<ExecutionPlan>> CompileForDevice(const Graph& graph, const PlanSpec& spec,
                                                        Device* device,
                                                        const CompileOptions& options) {
  PlanSpec local = spec;
  ASSIGN_OR_RETURN(auto rewritten, Rewrite(graph, &local, device->type(), options));
  if (rewritten) return ExecutionPlan::Compile(std::move(rewritten), local, device);
  return ExecutionPlan::Compile(graph, local, device);
}

Result<SessionDevices> CreateSessionDevices(const SessionOptions& options) {
  SessionDevices out;
  const bool several = !options.devices.empty();
  std::vector<std::string> names =
      several ? options.devices : std::vector<std::string>{options.device};
  const int n = static_cast<int>(names.size());
  ASSIGN_OR_RETURN(auto split, options.threads.Resolve());
  DeviceOptions device_options;
  device_options.threads =
      several ? ThreadBudget{std::max(1, split.num_threads / n), 1} : options.threads;
  if (options.device_memory_bytes < 0) {
    return InvalidArgument("device_memory_bytes is {}; it must be >= 0",
                           options.device_memory_bytes);
  }
  device_options.memory_limit = static_cast<size_t>(options.device_memory_bytes);
  // device_specs by canonical name, so "CPU:1" and "cpu:1" are one device.
  std::vector<std::string> canonical;
  for (const auto& name : names) {
    ASSIGN_OR_RETURN(DeviceName parsed, DeviceName::Parse(name));
    if (!parsed.index) parsed.index = 0;
    canonical.push_back(parsed.WithDefaults().ToString());
  }
  std::map<std::string, const DeviceSpec*> specs;
  for (const auto& [name, spec] : options.device_specs) {
    auto parsed = DeviceName::Parse(name);
    std::string full = parsed.ok() ? parsed->WithDefaults().ToString() : name;
    if (std::find(canonical.begin(), canonical.end(), full) == canonical.end()) {
      return InvalidArgument("device_specs names '{}', which is not among the session's devices",
                             name);
    }
    specs[full] = &spec;
  }
  DeviceSpec base;
  LinkDefaults links;
  if (several && options.calibrate_devices && n > 1) {
    ASSIGN_OR_RETURN(CpuCalibration c, CachedCpuCalibration(device_options.threads.num_threads));
    base = c.Apply(base);
    links.same_process = c.same_process;
  }
  out.set.set_link_defaults(links);
  for (int i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(names[i]));
    if (!name.index) name.index = 0;
    size_t limit = device_options.memory_limit;
    auto found = specs.find(canonical[i]);
    const DeviceSpec* given = found == specs.end() ? nullptr : found->second;
    if (given != nullptr && given->memory_bytes > 0 && limit == 0) {
      limit = static_cast<size_t>(given->memory_bytes);
    }
    DeviceOptions o = device_options;
    o.memory_limit = limit;
    ASSIGN_OR_RETURN(auto device, DeviceFactory::Global().Create(name, o));
    DeviceSpec spec = base;
    auto* gpu = dynamic_cast<CudaDevice*>(device.get());
    if (gpu != nullptr && several && options.calibrate_devices && given == nullptr) {
      ASSIGN_OR_RETURN(CudaCalibration c, CachedCudaCalibration(gpu->ordinal()));
      spec = c.Apply(spec);
    }
    if (given != nullptr) spec = *given;
    spec.name = device->name();
    spec.incarnation = device->incarnation();
    spec.memory_bytes = static_cast<double>(device->memory().limit);
    Status added = out.set.Add(spec);
    if (!added.ok()) {
      return added.code() == StatusCode::kInvalidArgument && out.set.Find(spec.name)
                 ? InvalidArgument("device '{}' is given twice ({})", names[i],
                                   device->canonical_name())
                 : added;
    }
    out.devices.push_back(std::move(device));
  }
  if (several && options.calibrate_devices) RETURN_IF_ERROR(SetGpuLinks(out, specs));
  return out;
}

Result<PlacementReport> PlaceForSession(const Graph& graph, const DeviceSet& devices,
                                        const SessionOptions& options) {
  PlacementReport placement;
  if (options.devices.empty()) {
    const DeviceName& device = devices.device(0).name;
    for (int v = 0; v < graph.num_nodes(); ++v) {
      const Node& node = graph.node(v);
      if (node.requested_device().empty()) continue;
      ASSIGN_OR_RETURN(DeviceName want, DeviceName::Parse(node.requested_device()));
      if (!want.Matches(device)) {
        return FailedPrecondition("node '{}' requests device '{}', but this session has only {}",
                                  node.name(), node.requested_device(), device.ToString());
      }
    }
    placement.device_of.assign(graph.num_nodes(), 0);
    return placement;
  }
  PlacerOptions placer = options.placer;
  MeasuredCosts measured;
  if (!options.cost_file.empty()) {
    ASSIGN_OR_RETURN(measured, MeasuredCosts::Load(options.cost_file));
    placer.costs.measured = &measured;
  }
  placer.log_placement = placer.log_placement || options.log_placement;
  ASSIGN_OR_RETURN(placement, Place(graph, devices, placer));
  if (options.log_placement) {
    fmt::print(stderr, "placement: {}\n", placement.Summary(devices));
    for (const auto& line : placement.log) fmt::print(stderr, "  {}\n", line);
  }
  return placement;
}

}  // namespace dflow
