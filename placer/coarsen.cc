#include "placer/coarsen.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace dflow {
namespace {

// Cheapest transfer of `bytes` between two different devices, over the distinct links.
class CheapestLink {
 public:
  CheapestLink(const DeviceSet& devices, const CostModel& costs) {
    // Transfer is affine in the bytes: keep (fixed, per-byte) pairs, deduplicated.
    for (int a = 0; a < devices.size(); ++a) {
      for (int b = 0; b < devices.size(); ++b) {
        if (a == b) continue;
        double fixed = costs.Transfer(0, a, b);
        double per_byte = costs.Transfer(1, a, b) - fixed;
        std::pair<double, double> link{fixed, per_byte};
        if (std::find(links_.begin(), links_.end(), link) == links_.end()) links_.push_back(link);
      }
    }
  }
  double Seconds(double bytes) const {
    double best = std::numeric_limits<double>::infinity();
    for (const auto& [fixed, per_byte] : links_) best = std::min(best, fixed + per_byte * bytes);
    return best;
  }

 private:
  std::vector<std::pair<double, double>> links_;
};

}  // namespace

int MergeChains(const Graph& graph, const DeviceSet& devices, const CostModel& costs,
                Constraints* c) {
  const int n = graph.num_nodes();
  if (devices.size() < 2 || n == 0) return 0;
  // The one consumer of each node, or -1 (none) or -2 (several).
  std::vector<int> consumer(n, -1);
  auto note = [&](int from, int to) {
    int& k = consumer[from];
    k = (k == -1 || k == to) ? to : -2;
  };
  for (int v = 0; v < n; ++v) {
    for (const auto& e : graph.node(v).inputs()) note(e.node, v);
    for (int u : graph.node(v).control_inputs()) note(u, v);
  }
  const int groups = static_cast<int>(c->groups.size());
  std::vector<int> parent(groups);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int g) {
    while (parent[g] != g) g = parent[g] = parent[parent[g]];
    return g;
  };
  std::vector<std::vector<int>> candidates(groups);
  std::vector<double> bytes(groups, 0);
  for (int k = 0; k < groups; ++k) candidates[k] = c->groups[k].candidates;
  for (int v = 0; v < n; ++v) bytes[c->group_of[v]] += costs.PersistentBytes(v);

  CheapestLink link(devices, costs);
  int merged = 0;
  std::vector<int> shared;
  for (int u = 0; u < n; ++u) {
    int v = consumer[u];
    if (v < 0) continue;
    int a = find(c->group_of[u]), b = find(c->group_of[v]);
    if (a == b) continue;
    double fastest = std::numeric_limits<double>::infinity();
    for (int d : candidates[a]) fastest = std::min(fastest, costs.Compute(u, d));
    if (fastest > link.Seconds(costs.TotalOutputBytes(u))) continue;
    shared.clear();
    std::set_intersection(candidates[a].begin(), candidates[a].end(), candidates[b].begin(),
                          candidates[b].end(), std::back_inserter(shared));
    if (shared.empty()) continue;
    double room = 0;
    for (int d : shared) room = std::max(room, devices.device(d).memory_bytes);
    if (bytes[a] + bytes[b] > room) continue;
    int root = std::min(a, b), other = std::max(a, b);
    parent[other] = root;
    candidates[root] = shared;
    bytes[root] += bytes[other];
    ++merged;
  }
  if (merged == 0) return 0;

  // Renumber the surviving groups in order of their first member.
  std::vector<int> index(groups, -1);
  std::vector<ColocationGroup> out;
  for (int v = 0; v < n; ++v) {
    int root = find(c->group_of[v]);
    if (index[root] < 0) {
      index[root] = static_cast<int>(out.size());
      out.push_back({{}, std::move(candidates[root])});
    }
    c->group_of[v] = index[root];
    out[index[root]].members.push_back(v);
  }
  c->groups = std::move(out);
  return merged;
}

}  // namespace dflow
