#include "placer/constraints.h"

#include <algorithm>
#include <numeric>

#include "framework/kernel.h"
#include "ops/register.h"

namespace dflow {
namespace {

class UnionFind {
 public:
  explicit UnionFind(int n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int Find(int x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void Union(int a, int b) {
    a = Find(a);
    b = Find(b);
    if (a != b) parent_[std::max(a, b)] = std::min(a, b);
  }

 private:
  std::vector<int> parent_;
};

std::string Join(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : ", ") + p;
  return s;
}

// Devices of `devices` whose type has a kernel for `op`.
std::vector<int> KernelDevices(const DeviceSet& devices, const std::string& op,
                               std::vector<std::string>* types) {
  *types = KernelRegistry::Global().DeviceTypesFor(op);
  std::vector<int> out;
  for (int d = 0; d < devices.size(); ++d) {
    if (std::find(types->begin(), types->end(), devices.device(d).type()) != types->end()) {
      out.push_back(d);
    }
  }
  return out;
}

std::vector<int> Intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

Result<Constraints> ApplyHardConstraints(const Graph& graph, const DeviceSet& devices,
                                         const ConstraintOptions& options) {
  if (!graph.validated()) return FailedPrecondition("placement needs a validated graph");
  ops::RegisterStandardOps();  // which device types have kernels is the registry's to say
  const int n = graph.num_nodes();
  UnionFind uf(n);
  std::map<std::string, int> by_group;
  for (int id = 0; id < n; ++id) {
    const Node& node = graph.node(id);
    if (!node.colocation_group().empty()) {
      auto [it, fresh] = by_group.emplace(node.colocation_group(), id);
      if (!fresh) uf.Union(it->second, id);
    }
    if (node.op_def() != nullptr && node.op_def()->stateful) {
      for (const auto& e : node.inputs()) {
        if (graph.node(e.node).role() == OpRole::kVariable) uf.Union(e.node, id);
      }
    }
  }

  // A constant read by one node only (a layer's weights) goes where that node goes: apart, it
  // would cross to it at every step.
  auto consumers = graph.Consumers();
  for (int id = 0; id < n; ++id) {
    const Node& node = graph.node(id);
    if (node.op() != "Const" || !node.inputs().empty() || !node.control_inputs().empty() ||
        !node.requested_device().empty() || !node.colocation_group().empty() ||
        options.already_placed.count(node.name())) {
      continue;
    }
    int only = -1;
    for (const auto& [to, slot] : consumers[id]) {
      if (only >= 0 && to != only) {
        only = -2;
        break;
      }
      only = to;
    }
    if (only >= 0) uf.Union(id, only);
  }

  Constraints out;
  out.group_of.assign(n, -1);
  std::vector<int> all(devices.size());
  std::iota(all.begin(), all.end(), 0);
  for (int id = 0; id < n; ++id) {
    int root = uf.Find(id);
    if (out.group_of[root] < 0) {
      out.group_of[root] = static_cast<int>(out.groups.size());
      out.groups.push_back({});
    }
    out.group_of[id] = out.group_of[root];
    out.groups[out.group_of[id]].members.push_back(id);
  }

  // Kernel devices per op, and matching devices per request, looked up once each.
  std::map<std::string, std::pair<std::vector<int>, std::vector<std::string>>, std::less<>> kernels;
  std::map<std::string, std::vector<int>, std::less<>> matching;
  auto kernel_devices = [&](const std::string& op) -> const auto& {
    auto it = kernels.find(op);
    if (it == kernels.end()) {
      std::vector<std::string> types;
      std::vector<int> found = KernelDevices(devices, op, &types);
      it = kernels.emplace(op, std::make_pair(std::move(found), std::move(types))).first;
    }
    return it->second;
  };
  auto matches = [&](const std::string& spec, const std::string& node,
                     const char* what) -> Result<const std::vector<int>*> {
    auto it = matching.find(spec);
    if (it == matching.end()) {
      auto name = DeviceName::Parse(spec);
      if (!name.ok()) {
        return InvalidArgument("node '{}': {} '{}': {}", node, what, spec, name.status().message());
      }
      it = matching.emplace(spec, devices.Matching(*name)).first;
    }
    return &it->second;
  };
  for (auto& group : out.groups) {
    std::vector<int> hard = all, requested = all;  // hard: kernels and earlier placements
    for (int id : group.members) {
      const Node& node = graph.node(id);
      hard = Intersect(hard, kernel_devices(node.op()).first);
      auto placed = options.already_placed.find(node.name());
      if (placed != options.already_placed.end()) {
        ASSIGN_OR_RETURN(auto* on, matches(placed->second, node.name(), "already placed on"));
        hard = Intersect(hard, *on);
      }
      if (!node.requested_device().empty()) {
        ASSIGN_OR_RETURN(auto* on,
                         matches(node.requested_device(), node.name(), "requested device"));
        requested = Intersect(requested, *on);
      }
    }
    std::vector<int> both = Intersect(hard, requested);
    if (!both.empty()) {
      group.candidates = both;
      continue;
    }
    // Explain: every member's op, kernel device types, earlier placement and request.
    std::vector<std::string> why;
    for (int id : group.members) {
      const Node& node = graph.node(id);
      const auto& types = kernel_devices(node.op()).second;
      std::string line = fmt::format("'{}' ({}, kernels for {})", node.name(), node.op(),
                                     types.empty() ? "no device type" : Join(types));
      auto placed = options.already_placed.find(node.name());
      if (placed != options.already_placed.end()) {
        line += fmt::format(" already placed on {}", placed->second);
      }
      if (!node.requested_device().empty()) {
        line += fmt::format(" requests '{}'", node.requested_device());
      }
      why.push_back(line);
    }
    std::string members = Join(why);
    if (options.soft_placement && !hard.empty()) {
      group.candidates = hard;
      std::vector<std::string> names;
      for (int d : hard) names.push_back(devices.DisplayName(d));
      out.log.push_back(
          fmt::format("soft placement: group [{}] cannot have its requested devices among {}; "
                      "placing it on one of {}",
                      members, devices.ShortList(), Join(names)));
      continue;
    }
    return FailedPrecondition(
        "cannot place colocation group [{}]: no device satisfies every member (devices: {})",
        members, devices.ShortList());
  }
  return out;
}

}  // namespace dflow
