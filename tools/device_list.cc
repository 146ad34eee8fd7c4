#include "tools/device_list.h"

#include <map>
#include <set>

#include "graph/device_name.h"

namespace dflow::tools {
namespace {

std::string Cpu(int index) { return "cpu:" + std::to_string(index); }

// The index of the local CPU `name` names; nullopt when it names none in particular.
std::optional<int> LocalCpuIndex(const DeviceName& name) {
  DeviceName full = name.WithDefaults();
  if (full.job != "localhost" || full.task != 0 || full.type != "CPU") return std::nullopt;
  return full.index;
}

}  // namespace

Result<std::vector<std::string>> ParseDeviceList(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("--devices '{}': {}", text, why);
  };
  std::map<int, std::string> given;  // index -> the spelling given
  size_t begin = 0;
  while (true) {
    size_t end = text.find(',', begin);
    std::string_view item = text.substr(begin, end == std::string_view::npos ? end : end - begin);
    if (item.empty()) return bad("an empty device name (expected cpu:0,cpu:1,...)");
    auto name = DeviceName::Parse(item);
    if (!name.ok()) return bad(std::string(name.status().message()));
    if (!name->type || !name->index) {
      return bad(fmt::format("'{}' names no single device; give its index, e.g. cpu:0", item));
    }
    std::optional<int> index = LocalCpuIndex(*name);
    if (!index) {
      return bad(
          fmt::format("'{}' is not a CPU device of this process; the tools run "
                      "/job:localhost/task:0/device:CPU:N only",
                      item));
    }
    auto [it, fresh] = given.emplace(*index, std::string(item));
    if (!fresh) {
      return bad(
          fmt::format("'{}' and '{}' are the same device, {}", it->second, item, Cpu(*index)));
    }
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  std::vector<std::string> devices;
  for (const auto& [index, spelling] : given) {
    int expected = static_cast<int>(devices.size());
    if (index != expected) {
      return bad(fmt::format("a session's devices are cpu:0 .. cpu:N-1, and {} is missing",
                             Cpu(expected)));
    }
    devices.push_back(Cpu(index));
  }
  if (devices.size() > kMaxDevices) {
    return bad(
        fmt::format("{} devices, more than the {} a tool creates", devices.size(), kMaxDevices));
  }
  return devices;
}

Result<std::vector<std::string>> DevicesRequestedBy(const Graph& graph) {
  int highest = 0;
  for (int v = 0; v < graph.num_nodes(); ++v) {
    const Node& node = graph.node(v);
    if (node.requested_device().empty()) continue;
    auto name = DeviceName::Parse(node.requested_device());
    if (!name.ok()) return name.status().WithPrefix(fmt::format("node '{}': ", node.name()));
    std::optional<int> index = name->index ? LocalCpuIndex(*name) : std::nullopt;
    if (!index) continue;
    if (*index >= kMaxDevices) {
      return FailedPrecondition(
          "node '{}' requests device '{}'; without --devices the tools run cpu:0 up to the "
          "highest CPU a node requests, at most {} devices (give --devices to choose)",
          node.name(), node.requested_device(), kMaxDevices);
    }
    highest = std::max(highest, *index);
  }
  std::vector<std::string> devices;
  for (int i = 0; i <= highest; ++i) devices.push_back(Cpu(i));
  return devices;
}

std::string JoinDevices(const std::vector<std::string>& devices) {
  std::string s;
  for (const auto& d : devices) s += (s.empty() ? "" : ",") + d;
  return s;
}

}  // namespace dflow::tools
