#include "tools/device_list.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "framework/device_factory.h"
#include "graph/device_name.h"

namespace dflow::tools {
namespace {

// "cpu:3", "gpu:0": the short name of a device of this process.
std::string Short(const std::string& type, int index) {
  std::string lower = type;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return lower + ":" + std::to_string(index);
}

// A device of this process: its type and index; nullopt when `name` names none in particular
// (another task, or no type or index).
std::optional<std::pair<std::string, int>> LocalDevice(const DeviceName& name) {
  if (!name.type || !name.index) return std::nullopt;
  DeviceName full = name.WithDefaults();
  if (full.job != "localhost" || full.task != 0) return std::nullopt;
  return std::make_pair(*full.type, *full.index);
}

// CPU first (the session's default device), then the other types by name.
bool TypeOrder(const std::string& a, const std::string& b) {
  if ((a == "CPU") != (b == "CPU")) return a == "CPU";
  return a < b;
}

}  // namespace

Result<std::vector<std::string>> ParseDeviceList(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("--devices '{}': {}", text, why);
  };
  const DeviceFactory& factory = DeviceFactory::Global();
  // type -> index -> the spelling given
  std::map<std::string, std::map<int, std::string>, decltype(&TypeOrder)> given(&TypeOrder);
  size_t begin = 0, count = 0;
  while (true) {
    size_t end = text.find(',', begin);
    std::string_view item = text.substr(begin, end == std::string_view::npos ? end : end - begin);
    if (item.empty()) return bad("an empty device name (expected cpu:0,cpu:1,... or gpu:0,...)");
    auto name = DeviceName::Parse(item);
    if (!name.ok()) return bad(std::string(name.status().message()));
    if (!name->type || !name->index) {
      return bad(fmt::format("'{}' names no single device; give its index, e.g. cpu:0", item));
    }
    auto local = LocalDevice(*name);
    if (!local) {
      return bad(
          fmt::format("'{}' is not a device of this process; the tools run "
                      "/job:localhost/task:0 devices (other processes: --cluster)",
                      item));
    }
    const auto& [type, index] = *local;
    if (type != "CPU") {
      std::string why;
      const int have = factory.Count(type, &why);
      if (have == 0) {
        return bad(fmt::format("'{}': no {} device here ({})", item, type, why));
      }
      if (index >= have) {
        return bad(fmt::format("'{}': this process has {} {} device{} ({} .. {})", item, have, type,
                               have == 1 ? "" : "s", Short(type, 0), Short(type, have - 1)));
      }
    }
    auto [it, fresh] = given[type].emplace(index, std::string(item));
    if (!fresh) {
      return bad(fmt::format("'{}' and '{}' are the same device, {}", it->second, item,
                             Short(type, index)));
    }
    ++count;
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  if (count > kMaxDevices) {
    return bad(fmt::format("{} devices, more than the {} a tool creates", count, kMaxDevices));
  }
  std::vector<std::string> devices;
  for (const auto& [type, indices] : given) {
    int expected = 0;
    for (const auto& [index, spelling] : indices) {
      // CPU devices are made up (each a thread pool): a session's are cpu:0 .. cpu:N-1.
      if (type == "CPU" && index != expected) {
        return bad(fmt::format("a session's CPU devices are cpu:0 .. cpu:N-1, and {} is missing",
                               Short(type, expected)));
      }
      devices.push_back(Short(type, index));
      ++expected;
    }
  }
  return devices;
}

Result<std::vector<std::string>> DevicesRequestedBy(const Graph& graph) {
  int highest_cpu = 0;
  std::map<std::string, std::set<int>, decltype(&TypeOrder)> others(&TypeOrder);
  for (int v = 0; v < graph.num_nodes(); ++v) {
    const Node& node = graph.node(v);
    if (node.requested_device().empty()) continue;
    auto name = DeviceName::Parse(node.requested_device());
    if (!name.ok()) return name.status().WithPrefix(fmt::format("node '{}': ", node.name()));
    auto local = LocalDevice(*name);
    if (!local) continue;
    const auto& [type, index] = *local;
    if (type != "CPU") {
      others[type].insert(index);
      continue;
    }
    if (index >= kMaxDevices) {
      return FailedPrecondition(
          "node '{}' requests device '{}'; without --devices the tools run cpu:0 up to the "
          "highest CPU a node requests, at most {} devices (give --devices to choose)",
          node.name(), node.requested_device(), kMaxDevices);
    }
    highest_cpu = std::max(highest_cpu, index);
  }
  std::vector<std::string> devices;
  for (int i = 0; i <= highest_cpu; ++i) devices.push_back(Short("CPU", i));
  for (const auto& [type, indices] : others) {
    for (int index : indices) devices.push_back(Short(type, index));
  }
  return devices;
}

std::string JoinDevices(const std::vector<std::string>& devices) {
  std::string s;
  for (const auto& d : devices) s += (s.empty() ? "" : ",") + d;
  return s;
}

}  // namespace dflow::tools
