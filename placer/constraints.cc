#include "placer/constraints.h"

#include <algorithm>
#include <numeric>

#include "ops/kernel.h"

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
        if (graph.node(e.node).op() == "Variable") uf.Union(e.node, id);
      }
    }
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

  for (auto& group : out.groups) {
    std::vector<int> hard = all, requested = all;  // hard: kernels and earlier placements
    std::vector<std::string> why;
    for (int id : group.members) {
      const Node& node = graph.node(id);
      std::vector<std::string> types;
      std::vector<int> kernel = KernelDevices(devices, node.op(), &types);
      hard = Intersect(hard, kernel);
      std::string line = fmt::format("'{}' ({}, kernels for {})", node.name(), node.op(),
                                     types.empty() ? "no device type" : Join(types));
      auto placed = options.already_placed.find(node.name());
      if (placed != options.already_placed.end()) {
        auto name = DeviceName::Parse(placed->second);
        if (!name.ok()) {
          return InvalidArgument("node '{}': already placed on '{}': {}", node.name(),
                                 placed->second, name.status().message());
        }
        hard = Intersect(hard, devices.Matching(*name));
        line += fmt::format(" already placed on {}", placed->second);
      }
      if (!node.requested_device().empty()) {
        auto name = DeviceName::Parse(node.requested_device());
        if (!name.ok()) {
          return InvalidArgument("node '{}': requested device: {}", node.name(),
                                 name.status().message());
        }
        requested = Intersect(requested, devices.Matching(*name));
        line += fmt::format(" requests '{}'", node.requested_device());
      }
      why.push_back(line);
    }
    std::vector<int> both = Intersect(hard, requested);
    if (!both.empty()) {
      group.candidates = both;
      continue;
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
