#include "placer/placer.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>

namespace dflow {
namespace {

// Successor edges with the bytes they carry (control edges carry none).
struct Edge {
  int to;
  double bytes;
};

std::vector<std::vector<Edge>> Successors(const Graph& g, const CostModel& costs) {
  std::vector<std::vector<Edge>> succ(g.num_nodes());
  for (int v = 0; v < g.num_nodes(); ++v) {
    for (const auto& e : g.node(v).inputs()) {
      succ[e.node].push_back({v, costs.OutputBytes(e.node, e.index)});
    }
    for (int c : g.node(v).control_inputs()) succ[c].push_back({v, 0});
  }
  return succ;
}

struct Simulation {
  double makespan = 0;
  std::vector<double> peak_bytes;
};

// List scheduling in `order` with a fixed placement; per-device peak of live outputs.
Simulation Simulate(const Graph& g, const CostModel& costs, const std::vector<int>& order,
                    const std::vector<int>& device_of, bool want_memory) {
  const int n = g.num_nodes();
  std::vector<double> finish(n, 0), device_free(costs.num_devices(), 0);
  // Links that queue: when each (from, to) pair is next free. A tensor crosses to a device once
  // (one Send/Recv pair per tensor and device, as the partitioner makes them): its arrival.
  std::vector<double> link_free(costs.num_devices() * costs.num_devices(), 0);
  std::map<std::tuple<int, int, int>, double> arrival;  // (node, output, device) -> seconds
  Simulation sim;
  for (int v : order) {
    int d = device_of[v];
    double ready = 0;
    for (const auto& e : g.node(v).inputs()) {
      const int from = device_of[e.node];
      double bytes = costs.OutputBytes(e.node, e.index);
      if (!costs.Queues(from, d)) {
        const double at = finish[e.node] + costs.Transfer(bytes, from, d);
        if (from != d) arrival.try_emplace({e.node, e.index, d}, at);
        ready = std::max(ready, at);
        continue;
      }
      auto [it, first] = arrival.try_emplace({e.node, e.index, d}, 0);
      if (first) {
        // Transfers go in the order their readers are scheduled, each once the link is free.
        double& free = link_free[from * costs.num_devices() + d];
        const double begin = std::max(finish[e.node], free);
        const double occupancy = costs.Occupancy(bytes, from, d);
        free = begin + occupancy;
        it->second = begin + costs.Transfer(bytes, from, d);
        // The receiving process's CPU copies the bytes in, taking that time from its device.
        device_free[d] = std::max(device_free[d], begin) + occupancy;
      }
      ready = std::max(ready, it->second);
    }
    for (int c : g.node(v).control_inputs()) {
      ready = std::max(ready, finish[c] + costs.Transfer(0, device_of[c], d));
    }
    double start = std::max(ready, device_free[d]);
    finish[v] = start + costs.Compute(v, d);
    device_free[d] = finish[v];
    sim.makespan = std::max(sim.makespan, finish[v]);
  }
  if (!want_memory) return sim;
  // A tensor lives on its device from its producer's start to its last reader's finish; its copy
  // on another device (one per tensor and device, as the partitioner's Recvs make them) lives
  // from its arrival to its last reader there.
  std::vector<std::vector<std::pair<double, double>>> events(costs.num_devices());
  std::vector<double> start(n);
  for (int v = 0; v < n; ++v) start[v] = finish[v] - costs.Compute(v, device_of[v]);
  std::vector<double> last_use(n);
  for (int v = 0; v < n; ++v) last_use[v] = finish[v];
  std::map<std::tuple<int, int, int>, double> copy_last_use;  // (node, output, device) -> seconds
  for (int v = 0; v < n; ++v) {
    for (const auto& e : g.node(v).inputs()) {
      last_use[e.node] = std::max(last_use[e.node], finish[v]);
      if (device_of[e.node] == device_of[v]) continue;
      // A received copy (of a value that is new memory where it was made, or a variable's).
      if (costs.ActivationBytes(e.node) > 0 || costs.PersistentBytes(e.node) > 0) {
        double& last = copy_last_use[{e.node, e.index, device_of[v]}];
        last = std::max(last, finish[v]);
      }
    }
  }
  for (const auto& [copy, last] : copy_last_use) {
    const auto [node, output, d] = copy;
    const double b = costs.OutputBytes(node, output);
    events[d].push_back({arrival.at(copy), b});
    events[d].push_back({last, -b});
  }
  // An element-wise node that is the only reader of an input of its size, made on its device,
  // writes its output over it (kernels forward such buffers, framework/kernel.h): the input's
  // buffer lives on as the output, and the output is no new memory.
  std::vector<int> readers(n, 0), buffer_of(n);
  for (int v = 0; v < n; ++v) {
    for (const auto& e : g.node(v).inputs()) ++readers[e.node];
  }
  std::vector<double> bytes(n);
  for (int v = 0; v < n; ++v) {
    bytes[v] = costs.ActivationBytes(v);
    buffer_of[v] = v;
  }
  for (int v : order) {
    const Node& node = g.node(v);
    if (bytes[v] <= 0 || node.op_def() == nullptr || !node.op_def()->elementwise ||
        node.num_outputs() != 1) {
      continue;
    }
    for (const auto& e : node.inputs()) {
      const int u = e.node;
      if (readers[u] != 1 || g.node(u).num_outputs() != 1 || device_of[u] != device_of[v] ||
          bytes[buffer_of[u]] <= 0 || costs.OutputBytes(u, 0) != costs.OutputBytes(v, 0)) {
        continue;
      }
      buffer_of[v] = buffer_of[u];
      bytes[v] = 0;
      break;
    }
  }
  std::vector<double> buffer_end(last_use);
  for (int v = 0; v < n; ++v) {
    buffer_end[buffer_of[v]] = std::max(buffer_end[buffer_of[v]], last_use[v]);
  }
  for (int v = 0; v < n; ++v) {
    if (bytes[v] <= 0) continue;
    events[device_of[v]].push_back({start[v], bytes[v]});
    events[device_of[v]].push_back({buffer_end[v], -bytes[v]});
  }
  sim.peak_bytes.assign(costs.num_devices(), 0);
  for (int d = 0; d < costs.num_devices(); ++d) {
    // Frees before allocations at the same instant.
    std::sort(events[d].begin(), events[d].end());
    double live = 0;
    for (const auto& [t, b] : events[d]) {
      live += b;
      sim.peak_bytes[d] = std::max(sim.peak_bytes[d], live);
    }
  }
  return sim;
}

class Chooser {
 public:
  Chooser(const Graph& g, const DeviceSet& devices, const Constraints& c, const CostModel& costs)
      : g_(g), devices_(devices), c_(c), costs_(costs), order_(ScheduleOrder(g, costs)) {
    group_bytes_.assign(c.groups.size(), 0);
    for (int v = 0; v < g.num_nodes(); ++v) group_bytes_[c.group_of[v]] += costs.PersistentBytes(v);
  }

  const std::vector<int>& order() const { return order_; }

  // TensorFlow's placement: the best single device where allowed.
  std::vector<int> Simple() const {
    int best = 0;
    double best_total = std::numeric_limits<double>::infinity();
    for (int d = 0; d < devices_.size(); ++d) {
      double total = 0;
      for (int v = 0; v < g_.num_nodes(); ++v) total += costs_.Compute(v, d);
      if (total < best_total) {
        best_total = total;
        best = d;
      }
    }
    std::vector<int> group_device(c_.groups.size());
    for (size_t k = 0; k < c_.groups.size(); ++k) {
      const auto& cands = c_.groups[k].candidates;
      group_device[k] =
          std::find(cands.begin(), cands.end(), best) != cands.end() ? best : cands.front();
    }
    return Expand(group_device);
  }

  Result<std::vector<int>> Heft() const {
    const int n = g_.num_nodes();
    std::vector<int> group_device(c_.groups.size(), -1);
    std::vector<double> used(devices_.size(), 0), finish(n, 0), device_free(devices_.size(), 0);
    std::vector<int> device_of(n, -1);
    for (int v : order_) {
      int k = c_.group_of[v];
      if (group_device[k] < 0) {
        double best = std::numeric_limits<double>::infinity();
        for (int d : c_.groups[k].candidates) {
          if (used[d] + group_bytes_[k] > devices_.device(d).memory_bytes) continue;
          double eft =
              std::max(Ready(v, d, finish, device_of), device_free[d]) + costs_.Compute(v, d);
          if (eft < best) {
            best = eft;
            group_device[k] = d;
          }
        }
        if (group_device[k] < 0) return NoRoom(k, used);
        used[group_device[k]] += group_bytes_[k];
      }
      int d = group_device[k];
      device_of[v] = d;
      finish[v] = std::max(Ready(v, d, finish, device_of), device_free[d]) + costs_.Compute(v, d);
      device_free[d] = finish[v];
    }
    return device_of;
  }

  // Moves whole groups to other candidates while the prediction improves: one group at a time,
  // then, on graphs of at most kMaxPairGroups groups, two at a time, which escapes the local
  // optima single moves get stuck in.
  void LocalSearch(std::vector<int>& device_of) const {
    for (int round = 0; round < 32; ++round) {
      SingleMoves(device_of);
      if (c_.groups.size() > kMaxPairGroups || !PairMove(device_of)) break;
    }
  }

  static constexpr size_t kMaxPairGroups = 48;
  static constexpr size_t kMaxRepairGroups = 256;

  // Tries every assignment of groups to candidates when there are at most `budget` of them;
  // leaves device_of at the best that fits. False when there are more.
  bool Exhaustive(std::vector<int>& device_of, double budget) const {
    double count = 1;
    for (const auto& group : c_.groups) count *= static_cast<double>(group.candidates.size());
    if (count > budget) return false;
    std::vector<int> trial = device_of;
    double best =
        FitsPeak(device_of) ? Predict(device_of) : std::numeric_limits<double>::infinity();
    std::vector<size_t> pick(c_.groups.size(), 0);
    while (true) {
      for (size_t k = 0; k < c_.groups.size(); ++k) {
        for (int v : c_.groups[k].members) trial[v] = c_.groups[k].candidates[pick[k]];
      }
      if (double t = Predict(trial); t < best * (1 - 1e-9) && FitsPeak(trial)) {
        best = t;
        device_of = trial;
      }
      size_t k = 0;  // next assignment, like an odometer
      while (k < pick.size() && ++pick[k] == c_.groups[k].candidates.size()) pick[k++] = 0;
      if (k == pick.size()) return true;
    }
  }

  // One improving move of two groups at once; false when there is none.
  bool PairMove(std::vector<int>& device_of) const {
    double best = Predict(device_of);
    std::vector<int> group_device(c_.groups.size());
    for (size_t k = 0; k < c_.groups.size(); ++k) {
      group_device[k] = device_of[c_.groups[k].members.front()];
    }
    auto set = [&](size_t k, int d) {
      for (int v : c_.groups[k].members) device_of[v] = d;
    };
    for (size_t a = 0; a < c_.groups.size(); ++a) {
      for (size_t b = a + 1; b < c_.groups.size(); ++b) {
        for (int da : c_.groups[a].candidates) {
          for (int db : c_.groups[b].candidates) {
            if (da == group_device[a] && db == group_device[b]) continue;
            set(a, da);
            set(b, db);
            if (Predict(device_of) < best * (1 - 1e-9) && FitsPeak(device_of)) return true;
            set(a, group_device[a]);
            set(b, group_device[b]);
          }
        }
      }
    }
    return false;
  }

  void SingleMoves(std::vector<int>& device_of) const {
    std::vector<int> group_device(c_.groups.size());
    std::vector<double> used(devices_.size(), 0);
    for (size_t k = 0; k < c_.groups.size(); ++k) {
      group_device[k] = device_of[c_.groups[k].members.front()];
      used[group_device[k]] += group_bytes_[k];
    }
    double best = Predict(device_of);
    for (int pass = 0; pass < 4; ++pass) {
      bool improved = false;
      for (size_t k = 0; k < c_.groups.size(); ++k) {
        int from = group_device[k];
        for (int d : c_.groups[k].candidates) {
          if (d == from || used[d] + group_bytes_[k] > devices_.device(d).memory_bytes) continue;
          for (int v : c_.groups[k].members) device_of[v] = d;
          double t = Predict(device_of);
          if (t < best * (1 - 1e-9) && FitsPeak(device_of)) {
            best = t;
            used[from] -= group_bytes_[k];
            used[d] += group_bytes_[k];
            group_device[k] = from = d;
            improved = true;
          } else {
            for (int v : c_.groups[k].members) device_of[v] = from;
          }
        }
      }
      if (!improved) break;
    }
  }

  // Bytes over device memory, summed over devices (variables plus peak activations).
  double Overflow(const std::vector<int>& device_of) const {
    std::vector<double> need = PeakNeeds(device_of);
    double over = 0;
    for (int d = 0; d < devices_.size(); ++d) {
      over += std::max(0.0, need[d] - static_cast<double>(devices_.device(d).memory_bytes));
    }
    return over;
  }

  // From a placement that does not fit, moves one group at a time, each time the move that
  // leaves the least overflow (the faster one among equals), until it fits; true when it does.
  // The local search only takes moves that keep a placement fitting, so without this a start
  // that overflows (the list schedule fills devices by variables alone) stays overflowing.
  bool Repair(std::vector<int>& device_of) const {
    // Each round simulates every move: bounded for the graphs the local search takes.
    if (c_.groups.size() > kMaxRepairGroups) return false;
    double over = Overflow(device_of);
    for (size_t round = 0; over > 0 && round < std::min<size_t>(c_.groups.size(), 64); ++round) {
      double best_over = over, best_time = std::numeric_limits<double>::infinity();
      size_t best_k = 0;
      int best_d = -1;
      for (size_t k = 0; k < c_.groups.size(); ++k) {
        const int from = device_of[c_.groups[k].members.front()];
        for (int d : c_.groups[k].candidates) {
          if (d == from) continue;
          for (int v : c_.groups[k].members) device_of[v] = d;
          double o = Overflow(device_of);
          if (o < best_over || (o == best_over && best_d >= 0)) {
            // Among moves that leave as little overflow, the faster; each predicted once.
            double t = Predict(device_of);
            if (o < best_over || t < best_time) {
              best_over = o;
              best_time = t;
              best_k = k;
              best_d = d;
            }
          }
          for (int v : c_.groups[k].members) device_of[v] = from;
        }
      }
      if (best_d < 0) break;
      for (int v : c_.groups[best_k].members) device_of[v] = best_d;
      over = best_over;
    }
    return over <= 0 && FitsPeak(device_of);
  }

  // Every group on device d where it may go (else its first candidate).
  std::vector<int> AllOn(int d) const {
    std::vector<int> group_device(c_.groups.size());
    for (size_t k = 0; k < c_.groups.size(); ++k) {
      const auto& cands = c_.groups[k].candidates;
      group_device[k] = std::find(cands.begin(), cands.end(), d) != cands.end() ? d : cands.front();
    }
    return Expand(group_device);
  }

  bool FitsMemory(const std::vector<int>& device_of) const {
    std::vector<double> used(devices_.size(), 0);
    for (int v = 0; v < g_.num_nodes(); ++v) used[device_of[v]] += costs_.PersistentBytes(v);
    for (int d = 0; d < devices_.size(); ++d) {
      if (used[d] > devices_.device(d).memory_bytes) return false;
    }
    return true;
  }

  // Variables plus peak live activations (as the simulated step lays them out) fit every device.
  bool FitsPeak(const std::vector<int>& device_of) const {
    if (!FitsMemory(device_of)) return false;
    std::vector<double> need = PeakNeeds(device_of);
    for (int d = 0; d < devices_.size(); ++d) {
      if (need[d] > devices_.device(d).memory_bytes) return false;
    }
    return true;
  }

  // Per device: variables plus peak live activations.
  std::vector<double> PeakNeeds(const std::vector<int>& device_of) const {
    std::vector<double> need = Simulate(g_, costs_, order_, device_of, true).peak_bytes;
    for (int v = 0; v < g_.num_nodes(); ++v) need[device_of[v]] += costs_.PersistentBytes(v);
    return need;
  }

  Status NoRoomForActivations(const std::vector<int>& device_of) const {
    std::vector<double> need = PeakNeeds(device_of), vars(devices_.size(), 0);
    for (int v = 0; v < g_.num_nodes(); ++v) vars[device_of[v]] += costs_.PersistentBytes(v);
    std::string over;
    for (int d = 0; d < devices_.size(); ++d) {
      if (need[d] <= devices_.device(d).memory_bytes) continue;
      over += fmt::format(
          "{}{} needs {:.0f} bytes (variables and constants {:.0f}, activations {:.0f}) of {:.0f}",
          over.empty() ? "" : "; ", devices_.DisplayName(d), need[d], vars[d], need[d] - vars[d],
          devices_.device(d).memory_bytes);
    }
    return ResourceExhausted(
        "no placement found whose variables, constants and peak activations fit device memory; the "
        "fastest: "
        "{}",
        over);
  }

  double Predict(const std::vector<int>& device_of) const {
    return Simulate(g_, costs_, order_, device_of, false).makespan;
  }

 private:
  double Ready(int v, int d, const std::vector<double>& finish,
               const std::vector<int>& device_of) const {
    double ready = 0;
    for (const auto& e : g_.node(v).inputs()) {
      ready = std::max(ready, finish[e.node] + costs_.Transfer(costs_.OutputBytes(e.node, e.index),
                                                               device_of[e.node], d));
    }
    for (int c : g_.node(v).control_inputs()) {
      ready = std::max(ready, finish[c] + costs_.Transfer(0, device_of[c], d));
    }
    return ready;
  }

  std::vector<int> Expand(const std::vector<int>& group_device) const {
    std::vector<int> device_of(g_.num_nodes());
    for (int v = 0; v < g_.num_nodes(); ++v) device_of[v] = group_device[c_.group_of[v]];
    return device_of;
  }

  Status NoRoom(int k, const std::vector<double>& used) const {
    std::string members, room;
    for (int v : c_.groups[k].members) {
      if (members.size() > 200) {
        members += ", ...";
        break;
      }
      members += (members.empty() ? "'" : ", '") + g_.node(v).name() + "'";
    }
    for (int d : c_.groups[k].candidates) {
      room += fmt::format("{}{}: {:.0f} of {:.0f} bytes in use", room.empty() ? "" : "; ",
                          devices_.DisplayName(d), used[d], devices_.device(d).memory_bytes);
    }
    return ResourceExhausted(
        "no device has room for the {:.0f} bytes of variables and constants of [{}] ({})",
        group_bytes_[k], members, room);
  }

  const Graph& g_;
  const DeviceSet& devices_;
  const Constraints& c_;
  const CostModel& costs_;
  std::vector<int> order_;
  std::vector<double> group_bytes_;
};

}  // namespace

std::vector<int> ScheduleOrder(const Graph& g, const CostModel& costs) {
  const int n = g.num_nodes(), devices = costs.num_devices();
  auto succ = Successors(g, costs);
  // Mean transfer between two different devices, weighted by how often a pair differs.
  double link_factor = 0;
  for (int a = 0; a < devices; ++a) {
    for (int b = 0; b < devices; ++b) link_factor += costs.Transfer(1e6, a, b) / 1e6;
  }
  link_factor /= static_cast<double>(devices) * devices;
  std::vector<double> rank(n, 0);
  const auto& topo = g.topological_order();
  std::vector<int> position(n);
  for (int i = 0; i < n; ++i) position[topo[i]] = i;
  for (int i = n - 1; i >= 0; --i) {
    int v = topo[i];
    double w = 0;
    for (int d = 0; d < devices; ++d) w += costs.Compute(v, d);
    w /= devices;
    double tail = 0;
    for (const Edge& e : succ[v]) tail = std::max(tail, e.bytes * link_factor + rank[e.to]);
    rank[v] = w + tail;
  }
  std::vector<int> order(topo.begin(), topo.end());
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (rank[a] != rank[b]) return rank[a] > rank[b];
    return position[a] < position[b];
  });
  return order;
}

double PredictStep(const Graph& g, const CostModel& costs, const std::vector<int>& order,
                   const std::vector<int>& device_of) {
  return Simulate(g, costs, order, device_of, false).makespan;
}

Result<PlacementReport> Place(const Graph& graph, const DeviceSet& devices,
                              const PlacerOptions& options) {
  if (!graph.validated()) return FailedPrecondition("placement needs a validated graph");
  if (devices.size() == 0) return InvalidArgument("placement needs at least one device");
  ASSIGN_OR_RETURN(Constraints c, ApplyHardConstraints(graph, devices, options.constraints));
  ASSIGN_OR_RETURN(CostModel costs, CostModel::Build(graph, devices, options.costs));
  PlacementReport r;
  // The list scheduler places the merged groups; the local search refines with the original
  // ones (a merge is a heuristic; the search may split what it should not have joined).
  // Without a local search the merged groups are final.
  const bool refine = graph.num_nodes() <= options.local_search_max_nodes;
  Constraints merged;
  Constraints* coarse = &c;
  if (options.merge_chains && options.kind == PlacerOptions::Kind::kCost) {
    if (refine) {
      merged = c;
      coarse = &merged;
    }
    r.chain_merges = MergeChains(graph, devices, costs, coarse);
  }
  r.groups = static_cast<int>(coarse->groups.size());
  Chooser chooser(graph, devices, c, costs);
  r.log = c.log;
  std::vector<int> simple = chooser.Simple();
  r.simple_step_s = chooser.Predict(simple);
  if (options.kind == PlacerOptions::Kind::kSimple) {
    r.device_of = simple;
  } else {
    if (coarse == &c) {
      ASSIGN_OR_RETURN(r.device_of, chooser.Heft());
    } else {
      ASSIGN_OR_RETURN(r.device_of, Chooser(graph, devices, *coarse, costs).Heft());
    }
    // Every placement considered, for the memory check at the end.
    std::vector<std::vector<int>> tried = {r.device_of};
    if (refine && chooser.Exhaustive(r.device_of, options.exhaustive_max_placements)) {
      // Small enough to try every assignment.
      tried.push_back(r.device_of);
    } else if (refine) {
      // Local search from the list schedule and from each single-device placement that fits.
      std::vector<int> list_schedule = r.device_of;
      chooser.LocalSearch(r.device_of);
      tried.push_back(r.device_of);
      if (!chooser.FitsPeak(r.device_of) && chooser.Repair(list_schedule)) {
        chooser.LocalSearch(list_schedule);
        tried.push_back(std::move(list_schedule));
      }
      for (int d = 0; d < devices.size(); ++d) {
        std::vector<int> start = chooser.AllOn(d);
        if (!chooser.FitsMemory(start)) continue;
        chooser.LocalSearch(start);
        tried.push_back(std::move(start));
      }
    }
    tried.push_back(simple);
    // The fastest prediction whose persistent bytes and peak activations fit every device.
    auto fastest_fitting = [&](int* fastest) -> const std::vector<int>* {
      std::vector<int> order(tried.size());
      std::iota(order.begin(), order.end(), 0);
      std::vector<double> predicted(tried.size());
      for (size_t i = 0; i < tried.size(); ++i) predicted[i] = chooser.Predict(tried[i]);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return predicted[a] < predicted[b]; });
      *fastest = order.front();
      for (int i : order) {
        if (chooser.FitsPeak(tried[i])) return &tried[i];
      }
      return nullptr;
    };
    int fastest = 0;
    const std::vector<int>* chosen = fastest_fitting(&fastest);
    if (chosen == nullptr && !refine) {
      // Large graphs: the single-device placements only when nothing else fits.
      for (int d = 0; d < devices.size(); ++d) tried.push_back(chooser.AllOn(d));
      chosen = fastest_fitting(&fastest);
    }
    if (chosen == nullptr) return chooser.NoRoomForActivations(tried[fastest]);
    r.device_of = *chosen;
  }
  Simulation sim = Simulate(graph, costs, chooser.order(), r.device_of, true);
  r.predicted_step_s = sim.makespan;
  r.persistent_bytes.assign(devices.size(), 0);
  for (int v = 0; v < graph.num_nodes(); ++v) {
    r.persistent_bytes[r.device_of[v]] += costs.PersistentBytes(v);
  }
  r.peak_bytes = sim.peak_bytes;
  for (int d = 0; d < devices.size(); ++d) r.peak_bytes[d] += r.persistent_bytes[d];
  // One Send/Recv pair per (tensor, destination device); control edges cross as empty tensors.
  std::vector<std::vector<std::pair<int, int>>> sent(graph.num_nodes());  // (output, device)
  for (int v = 0; v < graph.num_nodes(); ++v) {
    int dv = r.device_of[v];
    auto cross = [&](int u, int out, double bytes) {
      if (r.device_of[u] == dv) return;
      auto key = std::make_pair(out, dv);
      if (std::find(sent[u].begin(), sent[u].end(), key) != sent[u].end()) return;
      sent[u].push_back(key);
      r.cross_edges++;
      r.cross_bytes += bytes;
    };
    for (const auto& e : graph.node(v).inputs()) {
      cross(e.node, e.index, costs.OutputBytes(e.node, e.index));
    }
    for (int ctl : graph.node(v).control_inputs()) cross(ctl, -1, 0);
  }
  if (options.log_placement) {
    for (int v = 0; v < graph.num_nodes(); ++v) {
      r.log.push_back(fmt::format("{} ({}) -> {}", graph.node(v).name(), graph.node(v).op(),
                                  devices.DisplayName(r.device_of[v])));
    }
  }
  return r;
}

std::string PlacementReport::Summary(const DeviceSet& devices) const {
  std::string s = fmt::format("predicted step {:.3f} ms (simple placer: {:.3f} ms)\n",
                              predicted_step_s * 1e3, simple_step_s * 1e3);
  for (int d = 0; d < devices.size(); ++d) {
    int nodes = static_cast<int>(std::count(device_of.begin(), device_of.end(), d));
    s += fmt::format("  {}: {} nodes, variables and constants {:.2f} MiB, peak {:.2f} MiB\n",
                     devices.DisplayName(d), nodes, persistent_bytes[d] / (1 << 20),
                     peak_bytes[d] / (1 << 20));
  }
  s += fmt::format("  cross-device tensors: {} ({:.2f} MiB per step)", cross_edges,
                   cross_bytes / (1 << 20));
  return s;
}

}  // namespace dflow
