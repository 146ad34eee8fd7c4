#include "placer/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_map>

#include "ops/array_ops.h"
#include "ops/grad_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "rewrite/split_variables.h"

namespace dflow {
namespace {

using ops::Add;
using ops::AddN;
using ops::Concat;
using ops::Identity;
using ops::Mul;
using ops::NoOp;
using ops::ScalarConst;
using ops::Split;

constexpr int kNone = -1;

// A gradient input: node `node`'s input `input` in the single graph.
struct GradUse {
  int node;
  int input;
};

bool IsBatch(const Node& node) {
  if (node.role() != OpRole::kPlaceholder) return false;
  const Shape& shape = node.output_shape(0);
  return shape.rank() > 0 && shape.dims()[0] < 0;
}

// The forward node whose gradient autodiff built `name` for ("gradients/NODE_grad/..."; the
// longest such NODE that is a forward node), or kNone.
int ForwardOfGradient(const Graph& g, const std::string& name, const std::vector<bool>& forward) {
  int found = kNone;
  size_t found_len = 0;
  for (size_t at = name.find("gradients/"); at != std::string::npos;
       at = name.find("gradients/", at + 1)) {
    const size_t begin = at + 10;
    for (size_t end = name.find("_grad/", begin); end != std::string::npos;
         end = name.find("_grad/", end + 1)) {
      auto id = g.FindNode(std::string_view(name).substr(begin, end - begin));
      if (id && forward[*id] && end - begin > found_len) {
        found = *id;
        found_len = end - begin;
      }
    }
  }
  return found;
}

class Pipeliner {
 public:
  Pipeliner(const Graph& single, const PipelineOptions& options)
      : g_(single),
        o_(options),
        k_(static_cast<int>(options.devices.size())),
        m_(options.micro_batches) {}

  Result<PipelinedGraph> Run() {
    RETURN_IF_ERROR(Classify());
    RETURN_IF_ERROR(AssignItems());
    RETURN_IF_ERROR(PlanTheStages());
    AssignStages();
    out_.assign(m_, std::vector<std::vector<Output>>(g_.num_nodes()));
    added_.assign(m_, std::vector<int>(g_.num_nodes(), kNone));
    AddFeeds();
    std::vector<int> later;
    for (int id : g_.topological_order()) {
      if (g_.node(id).role() == OpRole::kPlaceholder) continue;
      if (reduced_reader_[id]) {
        later.push_back(id);
        continue;
      }
      RETURN_IF_ERROR(CopyAll(id));
    }
    RETURN_IF_ERROR(AccumulateGradients());
    for (int id : later) RETURN_IF_ERROR(CopyAll(id));
    RETURN_IF_ERROR(AddMeansAndGathers());
    RETURN_IF_ERROR(AddSchedule());
    RETURN_IF_ERROR(AddEvaluation());
    RETURN_IF_ERROR(root_.status());
    PipelinedGraph result;
    result.graph = root_.graph_ptr();
    result.devices = o_.devices;
    result.plan = plan_;
    for (int id : items_) result.items.push_back(g_.node(id).name());
    for (int id : gathered_) {
      result.evaluation[g_.node(id).name()] = EvaluationName(g_.node(id).name());
    }
    for (int id = 0; id < g_.num_nodes(); ++id) {
      if (stage_[id] != kNone) result.stage_of[g_.node(id).name()] = stage_[id];
    }
    return result;
  }

 private:
  // Which nodes are copied per micro-batch, which are the forward pass, where the gradients
  // reach the updates.
  Status Classify() {
    auto loss = g_.FindNode(o_.loss);
    if (o_.loss.empty()) return InvalidArgument("pipeline: no loss named");
    if (!loss) return NotFound("pipeline: no loss node '{}'", o_.loss);
    const int n = g_.num_nodes();
    per_mb_.assign(n, false);
    reduced_reader_.assign(n, false);
    for (int id : g_.topological_order()) {
      const Node& node = g_.node(id);
      const OpDef* def = node.op_def();
      if (IsBatch(node)) {
        per_mb_[id] = true;
        continue;
      }
      for (int i = 0; def != nullptr && def->stateful && i < node.num_inputs() &&
                      i < static_cast<int>(def->inputs.size());
           ++i) {
        if (def->inputs[i].name != "grad") continue;
        const Endpoint& in = node.inputs()[i];
        const Node& producer = g_.node(in.node);
        if (!producer.output_shape(in.index).fully_defined()) {
          return InvalidArgument(
              "pipeline: the gradient '{}:{}' of '{}' has shape {}; every dimension must be known",
              producer.name(), in.index, node.name(), producer.output_shape(in.index));
        }
        grad_uses_.push_back({id, i});
        reduced_reader_[id] = true;
      }
      bool reads_mb = false;
      for (const Endpoint& in : node.inputs()) {
        reduced_reader_[id] = reduced_reader_[id] || reduced_reader_[in.node];
        reads_mb = reads_mb || per_mb_[in.node];
      }
      for (int c : node.control_inputs()) {
        reduced_reader_[id] = reduced_reader_[id] || reduced_reader_[c];
        reads_mb = reads_mb || per_mb_[c];
      }
      per_mb_[id] = reads_mb && !reduced_reader_[id];
    }
    // A node kept once reads no micro-batch's value but the gradients it accumulates.
    std::set<std::pair<int, int>> grad_inputs;
    for (const GradUse& u : grad_uses_) grad_inputs.insert({u.node, u.input});
    for (int id = 0; id < n; ++id) {
      if (per_mb_[id]) continue;
      const Node& node = g_.node(id);
      for (int i = 0; i < node.num_inputs(); ++i) {
        const int src = node.inputs()[i].node;
        if (per_mb_[src] && !grad_inputs.count({id, i})) {
          return InvalidArgument(
              "pipeline: '{}' reads both the step's gradients and '{}', a value of each "
              "micro-batch; it can be neither once per step nor per micro-batch",
              node.name(), g_.node(src).name());
        }
      }
    }
    if (!per_mb_[*loss]) {
      return InvalidArgument(
          "pipeline: the loss '{}' does not depend on a batch placeholder (one whose first "
          "dimension is unknown), so there is nothing to split into micro-batches",
          o_.loss);
    }
    forward_.assign(n, false);
    std::vector<int> stack = {*loss};
    forward_[*loss] = true;
    while (!stack.empty()) {
      const int id = stack.back();
      stack.pop_back();
      for (const Endpoint& in : g_.node(id).inputs()) {
        if (per_mb_[in.node] && !forward_[in.node]) {
          forward_[in.node] = true;
          stack.push_back(in.node);
        }
      }
    }
    for (const auto* names : {&o_.averaged, &o_.gathered}) {
      for (const std::string& name : *names) {
        auto id = g_.FindNode(name);
        if (!id) {
          return NotFound("pipeline: no node '{}' to {} over micro-batches", name,
                          names == &o_.averaged ? "average" : "gather");
        }
        const Node& node = g_.node(*id);
        if (!per_mb_[*id] || node.num_outputs() == 0) {
          return InvalidArgument("pipeline: '{}' ({}) has no value per micro-batch to {}", name,
                                 node.op(), names == &o_.averaged ? "average" : "gather");
        }
        if (names == &o_.averaged && node.output_dtype(0) != DType::kF32 &&
            node.output_dtype(0) != DType::kF64) {
          return InvalidArgument("pipeline: '{}' ({}) has no f32 or f64 output to average", name,
                                 node.op());
        }
        (names == &o_.averaged ? averaged_ : gathered_).insert(*id);
      }
    }
    averaged_.insert(*loss);
    // The per-micro-batch nodes a step needs: those whose values reach a node kept once (an
    // update, through its gradient or a control edge) or a mean or gather. The others (an
    // input's gradient nothing reads, a metric nobody gathers) run only when fetched, outside
    // the schedule.
    needed_.assign(n, false);
    std::vector<int> stack2;
    auto need = [&](int id) {
      if (!needed_[id]) {
        needed_[id] = true;
        stack2.push_back(id);
      }
    };
    for (int id : averaged_) need(id);
    for (int id : gathered_) need(id);
    for (int id = 0; id < n; ++id) {
      if (per_mb_[id]) continue;
      const Node& node = g_.node(id);
      for (const Endpoint& in : node.inputs()) {
        if (per_mb_[in.node]) need(in.node);
      }
      for (int c : node.control_inputs()) {
        if (per_mb_[c]) need(c);
      }
    }
    while (!stack2.empty()) {
      const int id = stack2.back();
      stack2.pop_back();
      for (const Endpoint& in : g_.node(id).inputs()) {
        if (per_mb_[in.node]) need(in.node);
      }
      for (int c : g_.node(id).control_inputs()) {
        if (per_mb_[c]) need(c);
      }
    }
    return Status::OK();
  }

  // The chain of forward nodes, and the forward node each other per-micro-batch node goes with.
  Status AssignItems() {
    item_of_.assign(g_.num_nodes(), kNone);
    for (int id : g_.topological_order()) {
      if (!forward_[id] || g_.node(id).role() == OpRole::kPlaceholder) continue;
      item_of_[id] = static_cast<int>(items_.size());
      items_.push_back(id);
    }
    for (int id : g_.topological_order()) {
      const Node& node = g_.node(id);
      if (!per_mb_[id] || forward_[id] || node.role() == OpRole::kPlaceholder) continue;
      const int of = ForwardOfGradient(g_, node.name(), forward_);
      if (of != kNone) {
        item_of_[id] = item_of_[of];
        continue;
      }
      // With the earliest backward input (gradients flow to earlier stages), else the latest
      // forward one.
      int backward_min = kNone, forward_max = kNone;
      auto see = [&](int src) {
        if (item_of_[src] == kNone) return;
        if (forward_[src]) {
          forward_max = std::max(forward_max, item_of_[src]);
        } else {
          backward_min =
              backward_min == kNone ? item_of_[src] : std::min(backward_min, item_of_[src]);
        }
      };
      for (const Endpoint& in : node.inputs()) see(in.node);
      for (int c : node.control_inputs()) see(c);
      item_of_[id] = backward_min != kNone ? backward_min : std::max(forward_max, 0);
    }
    return Status::OK();
  }

  // The devices' figures, the chain's costs and bytes, and the stages.
  Status PlanTheStages() {
    if (items_.empty())
      return InvalidArgument("pipeline: the loss '{}' has no forward pass", o_.loss);
    DeviceSet defaults;
    const DeviceSet* set = o_.device_set;
    if (set == nullptr) {
      for (const std::string& d : o_.devices) {
        ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(d));
        if (!name.type || !name.index) {
          return InvalidArgument("pipeline: device '{}' names no type and index", d);
        }
        DeviceSpec spec;
        spec.name = DeviceName::Full(name.job.value_or("localhost"), name.task.value_or(0),
                                     *name.type, *name.index);
        RETURN_IF_ERROR(defaults.Add(spec).WithPrefix("pipeline: "));
      }
      set = &defaults;
    }
    std::vector<int> ds;
    PipelineDevices devices;
    for (const std::string& d : o_.devices) {
      ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(d));
      std::vector<int> match = set->Matching(name);
      if (match.empty()) {
        return InvalidArgument("pipeline: device '{}' is not among the devices {}", d,
                               set->ShortList());
      }
      if (std::find(ds.begin(), ds.end(), match[0]) != ds.end()) {
        return InvalidArgument("pipeline: device '{}' is given for two stages", d);
      }
      ds.push_back(match[0]);
      devices.names.push_back(d);
      devices.memory_bytes.push_back(set->device(match[0]).memory_bytes);
    }
    for (int s = 0; s + 1 < k_; ++s) devices.links.push_back(set->Link(ds[s], ds[s + 1]));
    CostOptions costs = o_.costs;
    costs.unknown_dim = std::max<int64_t>(1, costs.unknown_dim / m_);
    ASSIGN_OR_RETURN(CostModel model, CostModel::Build(g_, *set, costs));

    const int n = static_cast<int>(items_.size());
    StageChain chain;
    chain.forward_s.assign(n, std::vector<double>(k_, 0));
    chain.backward_s = chain.update_s = chain.forward_s;
    chain.persistent_bytes.assign(n, 0);
    chain.activation_bytes.assign(n, 0);
    for (int id : items_) chain.names.push_back(g_.node(id).name());
    for (int id = 0; id < g_.num_nodes(); ++id) {
      if (item_of_[id] == kNone || !needed_[id]) continue;
      auto& time = forward_[id] ? chain.forward_s : chain.backward_s;
      for (int s = 0; s < k_; ++s) time[item_of_[id]][s] += model.Compute(id, ds[s]);
      if (forward_[id]) chain.activation_bytes[item_of_[id]] += model.ActivationBytes(id);
    }
    // Each update once per step, and its gradient's accumulation (an add per micro-batch) and
    // bytes (the running sum and one micro-batch's gradient), with the gradient's producer.
    std::set<int> updates;
    for (const GradUse& u : grad_uses_) {
      const Endpoint& at = g_.node(u.node).inputs()[u.input];
      const int item = item_of_[at.node];
      if (item == kNone) continue;
      const double bytes = model.OutputBytes(at.node, at.index);
      chain.persistent_bytes[item] += 2 * bytes;
      for (int s = 0; s < k_; ++s) {
        chain.backward_s[item][s] += 3 * bytes / set->device(ds[s]).memory_bandwidth;
        if (!updates.count(u.node)) chain.update_s[item][s] += model.Compute(u.node, ds[s]);
      }
      updates.insert(u.node);
    }
    // Variables (and the optimizer state grouped with them) and constants with the first item
    // that reads them.
    std::vector<int> first_reader(g_.num_nodes(), kNone);
    for (int id = 0; id < g_.num_nodes(); ++id) {
      if (item_of_[id] == kNone) continue;
      for (const Endpoint& in : g_.node(id).inputs()) {
        int& r = first_reader[in.node];
        r = r == kNone ? item_of_[id] : std::min(r, item_of_[id]);
      }
    }
    const std::map<int, int> group = ops::VariableGroups(g_);
    std::map<int, int> group_item;
    for (const auto& [var, root] : group) {
      if (first_reader[var] == kNone) continue;
      auto [it, fresh] = group_item.try_emplace(root, first_reader[var]);
      if (!fresh) it->second = std::min(it->second, first_reader[var]);
    }
    for (int id = 0; id < g_.num_nodes(); ++id) {
      if (model.PersistentBytes(id) <= 0) continue;
      int item = first_reader[id];
      auto in_group = group.find(id);
      if (in_group != group.end()) {
        auto it = group_item.find(in_group->second);
        item = it != group_item.end() ? it->second : kNone;
      }
      if (item != kNone) chain.persistent_bytes[item] += model.PersistentBytes(id);
    }
    // What crosses a cut after item c: each tensor of a per-micro-batch node crosses every cut
    // between its producer's item and its farthest reader's, forward for the forward pass's
    // tensors, backward for the others; a transfer takes the larger direction.
    std::vector<double> ahead(n + 1, 0), back(n + 1, 0);
    const auto consumers = g_.Consumers();
    for (int id = 0; id < g_.num_nodes(); ++id) {
      if (item_of_[id] == kNone || !needed_[id]) continue;
      for (int o = 0; o < g_.node(id).num_outputs(); ++o) {
        int lo = item_of_[id], hi = item_of_[id];
        for (const auto& [c, slot] : consumers[id]) {
          if (slot < 0 || item_of_[c] == kNone || !needed_[c] ||
              g_.node(c).inputs()[slot].index != o) {
            continue;
          }
          lo = std::min(lo, item_of_[c]);
          hi = std::max(hi, item_of_[c]);
        }
        const double bytes = model.OutputBytes(id, o);
        if (hi > item_of_[id]) {
          ahead[item_of_[id]] += bytes;
          ahead[hi] -= bytes;
        }
        if (lo < item_of_[id]) {
          back[lo] += bytes;
          back[item_of_[id]] -= bytes;
        }
      }
    }
    chain.crossing_bytes.assign(n, 0);
    double a = 0, b = 0;
    for (int c = 0; c < n; ++c) {
      a += ahead[c];
      b += back[c];
      chain.crossing_bytes[c] = std::max(a, b);
    }
    std::vector<int> cuts;
    for (const std::string& name : o_.split_points) {
      auto id = g_.FindNode(name);
      if (!id || item_of_[*id] == kNone || !forward_[*id]) {
        return InvalidArgument(
            "pipeline: split point '{}' is not a node of the forward pass (the nodes between the "
            "batch placeholders and the loss '{}')",
            name, o_.loss);
      }
      cuts.push_back(item_of_[*id]);
    }
    ASSIGN_OR_RETURN(plan_, PlanStages(chain, devices, m_, o_.schedule, cuts));
    return Status::OK();
  }

  // Every per-micro-batch node's stage, a batch placeholder's (its first reader's), and that of
  // each node kept once that a stage reads (its first reader's, through others kept once).
  void AssignStages() {
    const int n = g_.num_nodes();
    stage_.assign(n, kNone);
    for (int id = 0; id < n; ++id) {
      if (item_of_[id] != kNone) stage_[id] = plan_.StageOf(item_of_[id]);
    }
    const auto& order = g_.topological_order();
    const auto consumers = g_.Consumers();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const int id = *it;
      const Node& node = g_.node(id);
      if (item_of_[id] != kNone) continue;
      const OpDef* def = node.op_def();
      if (!per_mb_[id] && def != nullptr && def->stateful && node.role() != OpRole::kVariable) {
        continue;  // an update or an Assign: placed with its variable
      }
      int first = kNone;
      for (const auto& [c, slot] : consumers[id]) {
        if (stage_[c] == kNone || reduced_reader_[c]) continue;
        first = first == kNone ? stage_[c] : std::min(first, stage_[c]);
      }
      stage_[id] = first;
    }
    // The rest (updates, their optimizer state and learning rates, initializers): an update or
    // Assign with its variable, another node with its first reader, so that every node of a
    // stage names the stage's device (Replicate maps each replica's devices by them).
    for (bool changed = true; changed;) {
      changed = false;
      for (auto it = order.rbegin(); it != order.rend(); ++it) {
        const int id = *it;
        const Node& node = g_.node(id);
        if (stage_[id] != kNone || node.role() == OpRole::kPlaceholder) continue;
        const OpDef* def = node.op_def();
        int stage = kNone;
        if (def != nullptr && def->stateful && node.role() != OpRole::kVariable) {
          for (const Endpoint& in : node.inputs()) {
            if (g_.node(in.node).role() == OpRole::kVariable && stage_[in.node] != kNone) {
              stage = stage_[in.node];
              break;
            }
          }
        } else {
          for (const auto& [c, slot] : consumers[id]) {
            if (stage_[c] != kNone) stage = stage == kNone ? stage_[c] : std::min(stage, stage_[c]);
          }
        }
        if (stage != kNone) {
          stage_[id] = stage;
          changed = true;
        }
      }
    }
  }

  std::string StageDevice(int id) const {
    return stage_[id] != kNone ? o_.devices[stage_[id]] : g_.node(id).requested_device();
  }

  // Batch placeholders: fed whole on their stage, split there into the micro-batches.
  void AddFeeds() {
    for (int id : g_.topological_order()) {
      const Node& node = g_.node(id);
      if (node.role() != OpRole::kPlaceholder) continue;
      const Scope on = root_.WithDevice(StageDevice(id));
      const int fed = on.WithOpName(node.name()).AddNode("Placeholder", {}, node.attrs());
      for (int m = 0; m < m_; ++m) added_[m][id] = fed;
      Output whole = root_.OutputOf(fed);
      if (!per_mb_[id] || m_ == 1) {
        for (int m = 0; m < m_; ++m) out_[m][id] = {whole};
        continue;
      }
      std::vector<Output> parts =
          Split(on.WithOpName(node.name() + "/microbatch_split"), whole, m_, 0);
      for (int m = 0; m < m_ && m < static_cast<int>(parts.size()); ++m) out_[m][id] = {parts[m]};
    }
  }

  Status CopyAll(int id) {
    if (per_mb_[id]) {
      for (int m = 0; m < m_; ++m) RETURN_IF_ERROR(Copy(id, m));
    } else {
      RETURN_IF_ERROR(Copy(id, 0));
      for (int m = 1; m < m_; ++m) {
        out_[m][id] = out_[0][id];
        added_[m][id] = added_[0][id];
      }
    }
    return Status::OK();
  }

  Output Input(int id, int i, int m) const {
    auto it = accumulated_.find({id, i});
    if (it != accumulated_.end()) return it->second;
    const Endpoint& in = g_.node(id).inputs()[i];
    const auto& outs = out_[m][in.node];
    return in.index < static_cast<int>(outs.size()) ? outs[in.index] : Output();
  }

  Status Copy(int id, int m) {
    const Node& node = g_.node(id);
    std::vector<Output> inputs;
    for (int i = 0; i < node.num_inputs(); ++i) {
      inputs.push_back(Input(id, i, m));
      if (!inputs.back().valid()) {
        return Internal("pipeline: input {} of '{}' has no copy in micro-batch {}", i, node.name(),
                        m);
      }
    }
    // A node kept once waits for every micro-batch's copy of a per-micro-batch control input (an
    // update for all the step's readers of its variable).
    std::vector<Output> control;
    for (int c : node.control_inputs()) {
      if (per_mb_[id] || !per_mb_[c]) {
        if (added_[m][c] != kNone) control.push_back(root_.OutputOf(added_[m][c]));
      } else {
        for (int k = 0; k < m_; ++k) control.push_back(root_.OutputOf(added_[k][c]));
      }
    }
    const std::string name = per_mb_[id] ? MicroBatchName(node.name(), m) : node.name();
    Scope s = root_.WithOpName(name).WithDevice(StageDevice(id));
    if (!control.empty()) s = s.WithControlDependencies(control);
    const int copy = s.AddNode(node.op(), inputs, node.attrs());
    RETURN_IF_ERROR(root_.status());
    if (!node.colocation_group().empty()) {
      root_.graph_ptr()->SetColocationGroup(
          copy, per_mb_[id] ? MicroBatchName(node.colocation_group(), m) : node.colocation_group());
    }
    added_[m][id] = copy;
    std::vector<Output> outs;
    for (int k = 0; k < node.num_outputs(); ++k) outs.push_back(root_.OutputOf(copy, k));
    out_[m][id] = std::move(outs);
    if (per_mb_[id] && needed_[id] && stage_[id] != kNone) {
      AddToUnit(copy, UnitIndex(stage_[id], !forward_[id], m));
    }
    return Status::OK();
  }

  // The mean of the micro-batches' gradients, summed as they come on the gradient's device.
  Status AccumulateGradients() {
    std::map<std::pair<int, int>, Output> done;
    for (const GradUse& use : grad_uses_) {
      const Endpoint& at = g_.node(use.node).inputs()[use.input];
      auto it = done.find({at.node, at.index});
      if (it == done.end()) {
        const Node& producer = g_.node(at.node);
        const Scope on =
            root_.WithNameScope(fmt::format("{}_{}/microbatch_mean", producer.name(), at.index))
                .WithDevice(StageDevice(at.node));
        // Each add (and the scaling) joins its micro-batch's backward unit, so the schedule
        // runs it before the stage moves on: a stage holds the sum and one gradient at a time.
        const bool scheduled = per_mb_[at.node] && stage_[at.node] != kNone;
        auto join = [&](const Output& added, int m) {
          if (scheduled) AddToUnit(added.node_id(), UnitIndex(stage_[at.node], true, m));
        };
        Output sum = out_[0][at.node][at.index];
        for (int m = 1; m < m_; ++m) {
          sum = Add(on, sum, out_[m][at.node][at.index]);
          join(sum, m);
        }
        if (m_ > 1) {
          sum = Mul(on, sum, ScalarConst(on, producer.output_dtype(at.index), 1.0 / m_));
          join(sum, m_ - 1);
        }
        it = done.emplace(std::make_pair(at.node, at.index), sum).first;
      }
      accumulated_[{use.node, use.input}] = it->second;
    }
    return root_.status();
  }

  // The loss's and the averaged nodes' means, the gathered nodes' concatenations, under their
  // names.
  Status AddMeansAndGathers() {
    for (int id : averaged_) {
      const Scope on = root_.WithDevice(StageDevice(id));
      std::vector<Output> copies;
      for (int m = 0; m < m_; ++m) copies.push_back(out_[m][id][0]);
      const DType dtype = g_.node(id).output_dtype(0);
      Output sum = m_ == 1 ? copies[0] : AddN(on, copies);
      Mul(on.WithOpName(g_.node(id).name()), sum, ScalarConst(on, dtype, 1.0 / m_));
    }
    for (int id : gathered_) {
      const Scope on = root_.WithDevice(StageDevice(id));
      std::vector<Output> copies;
      for (int m = 0; m < m_; ++m) copies.push_back(out_[m][id][0]);
      if (m_ == 1) {
        Identity(on.WithOpName(g_.node(id).name()), copies[0]);
      } else {
        Concat(on.WithOpName(g_.node(id).name()), copies, 0);
      }
    }
    return root_.status();
  }

  // For each gathered node, a copy of the forward pass to it on the whole batch, outside the
  // schedule: fetching it needs only the batch placeholders it reads (no labels, no backward).
  Status AddEvaluation() {
    std::vector<bool> ancestor(g_.num_nodes(), false);
    for (int id : gathered_) ancestor[id] = true;
    const auto& order = g_.topological_order();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if (!ancestor[*it]) continue;
      const Node& node = g_.node(*it);
      for (const Endpoint& in : node.inputs())
        ancestor[in.node] = ancestor[in.node] || per_mb_[in.node];
      for (int c : node.control_inputs()) ancestor[c] = ancestor[c] || per_mb_[c];
    }
    std::vector<int> copy(g_.num_nodes(), kNone);
    for (int id : order) {
      const Node& node = g_.node(id);
      if (!ancestor[id] || node.role() == OpRole::kPlaceholder) continue;
      // Inputs: another evaluation copy, a batch placeholder fed whole, or a node kept once.
      auto source = [&](int src) { return copy[src] != kNone ? copy[src] : added_[0][src]; };
      std::vector<Output> inputs;
      for (const Endpoint& in : node.inputs()) {
        inputs.push_back(root_.OutputOf(source(in.node), in.index));
      }
      std::vector<Output> control;
      for (int c : node.control_inputs()) control.push_back(root_.OutputOf(source(c)));
      Scope s = root_.WithOpName(EvaluationName(node.name())).WithDevice(StageDevice(id));
      if (!control.empty()) s = s.WithControlDependencies(control);
      copy[id] = s.AddNode(node.op(), inputs, node.attrs());
      RETURN_IF_ERROR(root_.status());
    }
    return Status::OK();
  }

  int UnitIndex(int stage, bool backward, int m) const { return (stage * 2 + backward) * m_ + m; }
  void AddToUnit(int new_id, int unit) {
    unit_of_[new_id] = unit;
    units_[unit].push_back(new_id);
  }

  // Control edges that make each stage run its units in the schedule's order: each unit's first
  // nodes (those with no input in the unit) wait for a NoOp over the previous unit's nodes.
  Status AddSchedule() {
    if (m_ == 1 && k_ == 1) return Status::OK();
    Graph& graph = *root_.graph_ptr();
    for (int s = 0; s < k_; ++s) {
      int previous = kNone;
      for (const PipelineUnit& u : StageOrder(o_.schedule, s, k_, m_)) {
        const int unit = UnitIndex(s, u.backward, u.micro_batch);
        auto nodes = units_.find(unit);
        if (nodes == units_.end()) continue;
        if (previous != kNone) {
          // The previous unit's sinks (nodes no node of the unit reads): every node of the
          // unit comes before one of them. Waiting on the others would pin them against
          // fusion (a MatMul into the BiasAdd and ReLU after it, rewrite/fusion.h).
          const std::vector<int>& before = units_.at(previous);
          std::set<int> read_inside;
          for (int id : before) {
            for (const Endpoint& in : graph.node(id).inputs()) read_inside.insert(in.node);
            for (int c : graph.node(id).control_inputs()) read_inside.insert(c);
          }
          std::vector<Output> wait;
          for (int id : before) {
            if (!read_inside.count(id)) wait.push_back(root_.OutputOf(id));
          }
          const std::string done =
              fmt::format("pipeline/stage{}/{}{}_done", s,
                          unit_info_[previous].backward ? "backward" : "forward",
                          unit_info_[previous].micro_batch);
          NoOp(root_.WithOpName(done).WithDevice(o_.devices[s]).WithControlDependencies(wait));
          RETURN_IF_ERROR(root_.status());
          for (int id : nodes->second) {
            const Node& node = graph.node(id);
            bool entry = true;
            auto in_unit = [&](int src) {
              auto it = unit_of_.find(src);
              return it != unit_of_.end() && it->second == unit;
            };
            for (const Endpoint& in : node.inputs()) entry = entry && !in_unit(in.node);
            for (int c : node.control_inputs()) entry = entry && !in_unit(c);
            if (entry) RETURN_IF_ERROR(graph.AddControlInput(id, done));
          }
        }
        previous = unit;
        unit_info_[unit] = u;
      }
    }
    return Status::OK();
  }

  const Graph& g_;
  const PipelineOptions& o_;
  const int k_, m_;
  Scope root_ = Scope::NewRootScope();
  std::vector<bool> per_mb_, reduced_reader_, forward_;
  std::vector<bool> needed_;  // per-micro-batch nodes a training step needs
  std::vector<GradUse> grad_uses_;
  std::set<int> averaged_, gathered_;
  std::vector<int> items_;    // forward nodes in topological order
  std::vector<int> item_of_;  // per-micro-batch node -> its item
  std::vector<int> stage_;    // node -> stage, or kNone
  StagePlan plan_;
  std::vector<std::vector<std::vector<Output>>> out_;  // [micro-batch][node] -> outputs
  std::vector<std::vector<int>> added_;                // [micro-batch][node] -> new id
  std::map<std::pair<int, int>, Output> accumulated_;  // (update, input) -> mean gradient
  std::unordered_map<int, int> unit_of_;               // new id -> its unit
  std::map<int, std::vector<int>> units_;              // unit -> its new nodes
  std::map<int, PipelineUnit> unit_info_;
};

}  // namespace

std::string MicroBatchName(const std::string& name, int micro_batch) {
  return fmt::format("microbatch{}/{}", micro_batch, name);
}

std::string EvaluationName(const std::string& name) { return "evaluation/" + name; }

std::string PipelinedGraph::Summary(const std::vector<double>& limits) const {
  const StagePlan& p = plan;
  std::string s = fmt::format(
      "pipeline: {} stages x {} micro-batches ({}), predicted step {:.2f} ms ({:.2f} ms without "
      "the bubble)\n",
      p.stages(), p.micro_batches, ScheduleName(p.schedule), p.predicted_step_s * 1e3,
      p.ideal_step_s * 1e3);
  for (int k = 0; k < p.stages(); ++k) {
    s += fmt::format(
        "  stage {} on {}: '{}' to '{}' ({} forward nodes), per micro-batch {:.2f} ms forward + "
        "{:.2f} ms backward, updates {:.2f} ms; memory {:.2f} MiB (variables and state {:.2f} + "
        "activations {:.2f} x {} in flight)",
        k, devices[k], items[p.first_item[k]], items[p.first_item[k + 1] - 1],
        p.first_item[k + 1] - p.first_item[k], p.forward_s[k] * 1e3, p.backward_s[k] * 1e3,
        p.update_s[k] * 1e3, p.peak_bytes[k] / (1 << 20), p.persistent_bytes[k] / (1 << 20),
        p.activation_bytes[k] / (1 << 20), p.in_flight[k]);
    if (k < static_cast<int>(limits.size())) {
      s += fmt::format(" of {:.2f} MiB", limits[k] / (1 << 20));
    }
    s += "\n";
  }
  return s;
}

MeasuredCosts PipelineNodeCosts(const MeasuredCosts& pipelined, const Graph& single) {
  MeasuredCosts out;
  for (const auto& [device, nodes] : pipelined.seconds) {
    std::map<std::string, std::pair<double, int>> copies;  // single-graph name -> (sum, count)
    auto& mine = out.seconds[device];
    for (const auto& [name, seconds] : nodes) {
      int m = -1, end = 0;
      if (std::sscanf(name.c_str(), "microbatch%d/%n", &m, &end) == 1 && end > 0) {
        auto& c = copies[name.substr(end)];
        c.first += seconds;
        c.second++;
      } else if (single.FindNode(name)) {
        mine[name] = seconds;
      }
    }
    for (int id = 0; id < single.num_nodes(); ++id) {
      const std::string& name = single.node(id).name();
      if (mine.count(name)) continue;
      auto it = copies.find(name);
      if (it != copies.end()) {
        mine[name] = it->second.first / it->second.second;
      } else if (single.node(id).role() != OpRole::kPlaceholder) {
        mine[name] = 0;
      }
    }
  }
  return out;
}

Result<PipelinedGraph> Pipeline(const Graph& single, const PipelineOptions& options) {
  if (options.devices.empty()) return InvalidArgument("pipeline: no devices given");
  if (options.micro_batches < 1) {
    return InvalidArgument("pipeline: micro-batches must be at least 1 ({} given)",
                           options.micro_batches);
  }
  if (single.validated()) return Pipeliner(single, options).Run();
  Graph copy = single;
  RETURN_IF_ERROR(copy.Validate().WithPrefix("pipeline: "));
  return Pipeliner(copy, options).Run();
}

}  // namespace dflow
