#include "runtime/session_devices.h"

#include <algorithm>
#include <map>

#include "framework/device_factory.h"
#include "runtime/calibration.h"

namespace dflow {
namespace {

// The links the devices' types know (a GPU's to host memory and to other GPUs, from its
// calibration); those of devices the user gave figures for are left to the defaults.
void SetTypeLinks(SessionDevices& out, const std::map<std::string, const DeviceSpec*>& given) {
  const int n = static_cast<int>(out.devices.size());
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      Device& from = *out.devices[a];
      Device& to = *out.devices[b];
      if (a == b || given.count(from.canonical_name()) || given.count(to.canonical_name())) {
        continue;
      }
      if (auto link = DeviceFactory::Global().Link(from, to)) out.set.SetLink(a, b, *link);
    }
  }
}

}  // namespace

Result<SessionDevices> CreateSessionDevices(const SessionOptions& options, bool shareable_memory) {
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
  device_options.shareable_memory = shareable_memory;
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
    if (several && options.calibrate_devices && given == nullptr) {
      ASSIGN_OR_RETURN(spec, DeviceFactory::Global().Calibrate(*device, spec));
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
  if (several && options.calibrate_devices) SetTypeLinks(out, specs);
  return out;
}

Result<PlacementReport> PlaceForSession(const Graph& graph, const DeviceSet& devices,
                                        const SessionOptions& options) {
  PlacementReport placement;
  // Read whether or not a placer runs: a cost file that is missing or unreadable is an error on
  // one device too, not a flag silently ignored.
  MeasuredCosts measured;
  if (!options.cost_file.empty()) {
    ASSIGN_OR_RETURN(measured, MeasuredCosts::Load(options.cost_file));
  }
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
  if (!options.cost_file.empty()) placer.costs.measured = &measured;
  placer.log_placement = placer.log_placement || options.log_placement;
  ASSIGN_OR_RETURN(placement, Place(graph, devices, placer));
  if (options.log_placement) {
    fmt::print(stderr, "placement: {}\n", placement.Summary(devices));
    for (const auto& line : placement.log) fmt::print(stderr, "  {}\n", line);
  }
  return placement;
}

}  // namespace dflow
