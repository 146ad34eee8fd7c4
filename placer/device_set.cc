#include "placer/device_set.h"

namespace dflow {

Result<DeviceSet> DeviceSet::LocalCpus(int n, const DeviceSpec& spec) {
  if (n < 1) return InvalidArgument("a device set needs at least one device, got {}", n);
  DeviceSet set;
  for (int i = 0; i < n; ++i) {
    DeviceSpec d = spec;
    d.name = DeviceName::Full("localhost", 0, "CPU", i);
    RETURN_IF_ERROR(set.Add(std::move(d)));
  }
  return set;
}

Status DeviceSet::Add(DeviceSpec spec) {
  if (!spec.name.fully_specified()) {
    return InvalidArgument("device '{}' is not fully specified (job, task, type and index)",
                           spec.name.ToString());
  }
  if (Find(spec.name))
    return InvalidArgument("device '{}' is already in the set", spec.canonical());
  if (!(spec.memory_bytes > 0) || !(spec.peak_flops > 0) || !(spec.memory_bandwidth > 0) ||
      !(spec.launch_overhead_s >= 0)) {
    return InvalidArgument(
        "device '{}': memory, peak FLOP/s and bandwidth must be positive and the launch "
        "overhead not negative",
        spec.canonical());
  }
  devices_.push_back(std::move(spec));
  return Status::OK();
}

void DeviceSet::SetLink(int from, int to, LinkSpec link) { links_[{from, to}] = link; }

std::optional<int> DeviceSet::Find(const DeviceName& full) const {
  for (int i = 0; i < size(); ++i) {
    if (devices_[i].name == full) return i;
  }
  return std::nullopt;
}

std::vector<int> DeviceSet::Matching(const DeviceName& request) const {
  std::vector<int> out;
  for (int i = 0; i < size(); ++i) {
    if (request.Matches(devices_[i].name)) out.push_back(i);
  }
  return out;
}

LinkSpec DeviceSet::Link(int from, int to) const {
  if (from == to) return {};
  auto it = links_.find({from, to});
  if (it != links_.end()) return it->second;
  const DeviceSpec& a = devices_[from];
  const DeviceSpec& b = devices_[to];
  if (a.host != b.host) return defaults_.other_host;
  if (a.name.job == b.name.job && a.name.task == b.name.task) return defaults_.same_process;
  return defaults_.same_host;
}

std::string DeviceSet::DisplayName(int i) const {
  const DeviceName& n = devices_[i].name;
  if (n.job == "localhost" && n.task == 0) {
    return DeviceName{std::nullopt, std::nullopt, n.type, n.index}.ShortString();
  }
  return n.ShortString();
}

std::string DeviceSet::ShortList() const {
  std::string s;
  for (int i = 0; i < size(); ++i) s += (s.empty() ? "" : ", ") + DisplayName(i);
  return s.empty() ? "none" : s;
}

}  // namespace dflow
