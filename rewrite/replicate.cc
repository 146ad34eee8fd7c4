#include "rewrite/replicate.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "graph/device_name.h"
#include "ops/array_ops.h"
#include "ops/grad_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "rewrite/split_variables.h"

namespace dflow::ops {
namespace {

// A gradient input: node `node`'s input `input` in the single graph.
struct GradUse {
  int node;
  int input;
};

// A device's parsed name ("cpu:1" and "/device:CPU:1" give the same), or `device` as given.
std::string CanonicalDevice(const std::string& device) {
  auto name = DeviceName::Parse(device);
  return name.ok() ? name->ToString() : device;
}

class Replicator {
 public:
  // `split`: the rewrite that made `single` with variables in row blocks, if one did.
  Replicator(const Graph& single, const ReplicateOptions& options, const SplitVariables* split)
      : g_(single), o_(options), n_(static_cast<int>(options.devices.size())) {
    if (!options.replica_devices.empty()) {
      for (size_t k = 0; k < options.replica_devices[0].size(); ++k) {
        mapped_.emplace(CanonicalDevice(options.replica_devices[0][k]), static_cast<int>(k));
      }
    }
    if (split != nullptr) {
      whole_reads_.insert(split->whole_reads.begin(), split->whole_reads.end());
      split_ = split->blocks;
    }
  }

  Result<ReplicatedGraph> Run() {
    RETURN_IF_ERROR(Classify());
    out_.assign(n_, std::vector<std::vector<Output>>(g_.num_nodes()));
    added_.assign(n_, std::vector<int>(g_.num_nodes(), -1));
    AddFeeds();
    // First every node up to the gradients, then the all-reduces, then the updates and what
    // follows them.
    std::vector<int> later;
    for (int id : g_.topological_order()) {
      if (g_.node(id).role() == OpRole::kPlaceholder) continue;
      if (NeedsReduced(id)) {
        later.push_back(id);
        continue;
      }
      RETURN_IF_ERROR(CopyAll(id));
    }
    if (backups()) {
      RETURN_IF_ERROR(CollectOnServers());
    } else if (!async()) {
      RETURN_IF_ERROR(ps_mode() ? AverageOnServers() : AllReduceGradients());
    }
    for (int id : later) RETURN_IF_ERROR(CopyAll(id));
    if (backups()) RETURN_IF_ERROR(AddBackupTargets());
    RETURN_IF_ERROR(AddGroups());
    if (!ps_mode()) RETURN_IF_ERROR(AddSync());
    RETURN_IF_ERROR(root_.status());
    ReplicatedGraph result;
    result.graph = root_.graph_ptr();
    result.sync_target = sync_name_;
    result.buckets = buckets_;
    result.replicas = n_;
    result.split_variables = split_;
    result.asynchronous = async();
    if (o_.mode == ReplicateOptions::Mode::kBoundedStaleness) result.max_staleness = o_.staleness;
    result.backup_workers = backups() ? o_.backup_workers : 0;
    result.replica_targets = replica_targets_;
    result.apply_target = apply_target_;
    result.weights_feed = weights_feed_;
    result.init_target = init_target_;
    return result;
  }

 private:
  // Finds the gradients, the grouped and averaged nodes, and the nodes that read a reduced
  // gradient (directly or through others).
  Status Classify() {
    for (const std::string& name : o_.averaged) {
      auto id = g_.FindNode(name);
      if (!id) return NotFound("Replicate: no node '{}' to average over replicas", name);
      const Node& node = g_.node(*id);
      if (node.num_outputs() == 0 ||
          (node.output_dtype(0) != DType::kF32 && node.output_dtype(0) != DType::kF64)) {
        return InvalidArgument("Replicate: '{}' ({}) has no f32 or f64 output to average", name,
                               node.op());
      }
      averaged_.insert(*id);
    }
    std::vector<bool> read(g_.num_nodes(), false);
    for (int id = 0; id < g_.num_nodes(); ++id) {
      for (const Endpoint& in : g_.node(id).inputs()) read[in.node] = true;
    }
    reduced_reader_.assign(g_.num_nodes(), false);
    for (int id : g_.topological_order()) {
      const Node& node = g_.node(id);
      const OpDef* def = node.op_def();
      for (int i = 0; def != nullptr && def->stateful && i < node.num_inputs() &&
                      i < static_cast<int>(def->inputs.size());
           ++i) {
        if (def->inputs[i].name != "grad") continue;
        const Endpoint& in = node.inputs()[i];
        const Node& producer = g_.node(in.node);
        if (!producer.output_shape(in.index).fully_defined()) {
          return InvalidArgument(
              "Replicate: the gradient '{}:{}' of '{}' has shape {}; every dimension must be known",
              producer.name(), in.index, node.name(), producer.output_shape(in.index));
        }
        grad_uses_.push_back({id, i});
        reduced_reader_[id] = true;
      }
      for (const Endpoint& in : node.inputs()) {
        if (reduced_reader_[in.node]) reduced_reader_[id] = true;
      }
      for (int c : node.control_inputs()) {
        if (reduced_reader_[c]) reduced_reader_[id] = true;
      }
      const bool effect = node.role() == OpRole::kNoOp || (def != nullptr && def->stateful);
      if (!read[id] && effect && node.role() != OpRole::kVariable && !averaged_.count(id)) {
        grouped_.insert(id);
      }
    }
    ClassifyShared();
    if (async() || backups()) {
      // Each replica runs its own steps: nothing is grouped or averaged over replicas.
      grouped_.clear();
      averaged_.clear();
    }
    // A node kept once needs no group over replicas.
    for (auto it = grouped_.begin(); it != grouped_.end();) {
      it = per_replica_[*it] ? std::next(it) : grouped_.erase(it);
    }
    return Status::OK();
  }

  bool NeedsReduced(int id) const { return reduced_reader_[id]; }
  bool ps_mode() const { return !o_.parameter_servers.empty(); }
  bool async() const { return o_.mode != ReplicateOptions::Mode::kSync; }
  // Synchronous with backup workers: replicas run their own steps, as asynchronous ones do, but
  // leave their gradients on the servers for one update a step.
  bool backups() const { return ps_mode() && !async() && o_.backup_workers > 0; }
  bool own_batches() const { return async() || backups() || o_.feed_shards; }

  // Replica r's device for a node of the single graph that requests `requested`: its
  // counterpart among replica_devices[r], or devices[r].
  // (Devices compare by their parsed names, CanonicalDevice.)
  const std::string& DeviceIn(const std::string& requested, int r) const {
    if (mapped_.empty()) return o_.devices[r];
    auto it = mapped_.find(CanonicalDevice(requested));
    return it != mapped_.end() ? o_.replica_devices[r][it->second] : o_.devices[r];
  }

  // With parameter servers, a node is kept once (shared) unless it reads a batch (directly or
  // through others); the updates are shared too, their gradients averaged over replicas (or,
  // asynchronously, copied per replica and placed on their variable's server).
  void ClassifyShared() {
    per_replica_.assign(g_.num_nodes(), !ps_mode());
    if (!ps_mode()) return;
    std::vector<int64_t> load(o_.parameter_servers.size(), 0);
    std::vector<std::pair<int64_t, int>> variables;
    for (int id : g_.topological_order()) {
      const Node& node = g_.node(id);
      if (node.role() == OpRole::kPlaceholder) {
        const Shape& shape = node.output_shape(0);
        per_replica_[id] = n_ > 1 && shape.rank() > 0 && shape.dims()[0] < 0;
        continue;
      }
      if (whole_reads_.count(node.name())) {
        per_replica_[id] = true;  // each replica joins a split variable's blocks itself
        continue;
      }
      if (node.role() == OpRole::kVariable) {
        const int64_t n = node.output_shape(0).num_elements();
        variables.emplace_back(std::max<int64_t>(n, 1) * DTypeSize(node.output_dtype(0)), id);
      }
      if (!async() && reduced_reader_[id] && node.op_def() != nullptr && node.op_def()->stateful) {
        continue;
      }
      bool reads_batch = false;
      for (const Endpoint& in : node.inputs()) reads_batch = reads_batch || per_replica_[in.node];
      for (int c : node.control_inputs()) reads_batch = reads_batch || per_replica_[c];
      per_replica_[id] = reads_batch;
    }
    // A variable goes with the others an update reads (Adam's moments and step count), so
    // whole groups are spread.
    const std::map<int, int> group = VariableGroups(g_);
    std::map<int, int64_t> group_bytes;
    for (const auto& [bytes, id] : variables) group_bytes[group.at(id)] += bytes;
    std::vector<std::pair<int64_t, int>> groups;
    for (const auto& [root, bytes] : group_bytes) groups.emplace_back(bytes, root);
    std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::map<int, std::string> server_of_group;
    for (const auto& [bytes, root] : groups) {
      const size_t ps = std::min_element(load.begin(), load.end()) - load.begin();
      load[ps] += bytes;
      server_of_group[root] = o_.parameter_servers[ps];
    }
    for (const auto& [bytes, id] : variables) server_of_[id] = server_of_group[group.at(id)];
  }

  // Copies node `id` into every replica, or once when it is shared.
  Status CopyAll(int id) {
    if (per_replica_[id]) {
      for (int r = 0; r < n_; ++r) RETURN_IF_ERROR(Copy(id, r));
      return Status::OK();
    }
    RETURN_IF_ERROR(Copy(id, 0));
    for (int r = 1; r < n_; ++r) {
      out_[r][id] = out_[0][id];
      added_[r][id] = added_[0][id];
    }
    return Status::OK();
  }

  // The parameter servers' mean of every gradient: the replicas' copies summed on the device
  // of the variable the update changes, then scaled by 1/N.
  Status AverageOnServers() {
    for (const GradUse& use : grad_uses_) {
      const Node& update = g_.node(use.node);
      const Endpoint& at = update.inputs()[use.input];
      auto server = server_of_.find(update.inputs()[0].node);
      const Scope on =
          root_.WithDevice(server != server_of_.end() ? server->second : o_.parameter_servers[0]);
      std::vector<Output> grads;
      for (int r = 0; r < n_; ++r) grads.push_back(out_[r][at.node][at.index]);
      const DType dtype = g_.node(at.node).output_dtype(at.index);
      Output mean = n_ == 1 ? grads[0] : Mul(on, AddN(on, grads), ScalarConst(on, dtype, 1.0 / n_));
      reduced_[{use.node, use.input}] = std::vector<Output>(n_, mean);
    }
    return root_.status();
  }

  // Backup workers: each replica's gradient is assigned to a slot of its own on the variable's
  // server; the update reads the sum over replicas of slot times that replica's weight (fed
  // per step: 1/k for the k replicas counted, 0 for the others).
  Status CollectOnServers() {
    const Scope on_first = root_.WithDevice(o_.parameter_servers[0]);
    weights_feed_ = FreeName("replica_weights");
    Output weights = Placeholder(on_first.WithOpName(weights_feed_), DType::kF32, Shape{n_});
    slot_assigns_.assign(n_, {});
    std::map<std::pair<int, int>, Output> mean_of;  // gradient endpoint -> its weighted sum
    for (const GradUse& use : grad_uses_) {
      const Node& update = g_.node(use.node);
      const Endpoint& at = update.inputs()[use.input];
      auto done = mean_of.find({at.node, at.index});
      if (done != mean_of.end()) {
        reduced_[{use.node, use.input}] = std::vector<Output>(n_, done->second);
        continue;
      }
      auto server = server_of_.find(update.inputs()[0].node);
      const Scope on =
          root_.WithDevice(server != server_of_.end() ? server->second : o_.parameter_servers[0]);
      const Node& producer = g_.node(at.node);
      const DType dtype = producer.output_dtype(at.index);
      const Shape& shape = producer.output_shape(at.index);
      std::vector<Output> terms;
      for (int r = 0; r < n_; ++r) {
        const std::string slot_name =
            ReplicaName(fmt::format("{}_{}/gradient_slot", producer.name(), at.index), r);
        Output slot = Variable(on.WithOpName(slot_name), shape, dtype);
        slot_assigns_[r].push_back(
            Assign(on.WithOpName(slot_name + "/assign"), slot, out_[r][at.node][at.index]));
        slot_inits_.push_back(
            Assign(on.WithOpName(slot_name + "/init"), slot, Fill(on, shape, 0, dtype)));
        Output w = Slice(on, weights, {r}, {1});
        if (dtype != DType::kF32) w = Cast(on, w, dtype);
        terms.push_back(Mul(on, slot, w));
      }
      Output mean = n_ == 1 ? terms[0] : AddN(on, terms);
      mean_of[{at.node, at.index}] = mean;
      reduced_[{use.node, use.input}] = std::vector<Output>(n_, mean);
    }
    return root_.status();
  }

  // Backup workers: each replica's target (its gradients into their slots), the update over
  // all of them, and the slots' initializer.
  Status AddBackupTargets() {
    for (int r = 0; r < n_; ++r) {
      replica_targets_.push_back(FreeName(fmt::format("replica{}/gradients", r)));
      NoOp(root_.WithOpName(replica_targets_.back()).WithControlDependencies(slot_assigns_[r]));
    }
    std::vector<Output> updates;
    for (const GradUse& use : grad_uses_) updates.push_back(root_.OutputOf(added_[0][use.node]));
    apply_target_ = FreeName("apply_gradients");
    NoOp(root_.WithOpName(apply_target_).WithControlDependencies(updates));
    init_target_ = FreeName("gradient_slots_init");
    NoOp(root_.WithOpName(init_target_).WithControlDependencies(slot_inits_));
    return root_.status();
  }

  // `name`, or name_1, name_2, ...: the first the new graph lacks.
  std::string FreeName(const std::string& name) const {
    std::string free = name;
    for (int i = 1; root_.graph().FindNode(free) || g_.FindNode(free); ++i) {
      free = fmt::format("{}_{}", name, i);
    }
    return free;
  }

  // The name of node `id`'s copy in replica r.
  std::string Name(int id, int r) const {
    const std::string& name = g_.node(id).name();
    if (r == 0 && (averaged_.count(id) || grouped_.count(id))) return "replica0/" + name;
    return ReplicaName(name, r);
  }

  void AddFeeds() {
    for (int id : g_.topological_order()) {
      const Node& node = g_.node(id);
      if (node.role() != OpRole::kPlaceholder) continue;
      const Scope first = root_.WithDevice(DeviceIn(node.requested_device(), 0));
      const int fed = first.WithOpName(node.name()).AddNode("Placeholder", {}, node.attrs());
      Output whole = root_.OutputOf(fed);
      const Shape& shape = node.output_shape(0);
      const bool batch = n_ > 1 && shape.rank() > 0 && shape.dims()[0] < 0;
      if (batch && own_batches()) {
        // A placeholder of each replica's own, fed its batch or its share of one.
        out_[0][id] = {whole};
        for (int r = 1; r < n_; ++r) {
          const int own = root_.WithOpName(Name(id, r))
                              .WithDevice(DeviceIn(node.requested_device(), r))
                              .AddNode("Placeholder", {}, node.attrs());
          out_[r][id] = {root_.OutputOf(own)};
        }
      } else if (batch) {
        std::vector<Output> parts =
            Split(first.WithOpName(fmt::format("{}/replica_split", node.name())), whole, n_, 0);
        for (int r = 0; r < n_ && r < static_cast<int>(parts.size()); ++r) {
          out_[r][id] = {parts[r]};
        }
      } else {
        for (int r = 0; r < n_; ++r) out_[r][id] = {whole};
      }
    }
  }

  // The copy of input `i` of node `id` in replica r.
  Output Input(int id, int i, int r) const {
    const Node& node = g_.node(id);
    // Replicas other than the first assign replica 0's values: identical initial copies.
    // (A value read straight from a Variable stays the replica's own: an Assign is placed with
    // every Variable it reads.)
    if (r > 0 && !async() && node.role() == OpRole::kAssign && i == 1 &&
        g_.node(node.inputs()[i].node).role() != OpRole::kVariable) {
      return Input(id, i, 0);
    }
    auto it = reduced_.find({id, i});
    if (it != reduced_.end()) return it->second[r];
    const Endpoint& in = node.inputs()[i];
    const auto& outs = out_[r][in.node];
    return in.index < static_cast<int>(outs.size()) ? outs[in.index] : Output();
  }

  Status Copy(int id, int r) {
    const Node& node = g_.node(id);
    std::vector<Output> inputs;
    for (int i = 0; i < node.num_inputs(); ++i) {
      inputs.push_back(Input(id, i, r));
      if (!inputs.back().valid()) {
        return Internal("Replicate: input {} of '{}' has no copy in replica {}", i, node.name(), r);
      }
    }
    std::vector<Output> control;
    for (int c : node.control_inputs()) {
      // With backup workers a shared node (an update) runs in a step of its own: the order
      // against a replica's nodes (an update after the variable's readers) holds by itself.
      if (backups() && !per_replica_[id] && per_replica_[c]) continue;
      if (added_[r][c] >= 0) control.push_back(root_.OutputOf(added_[r][c]));
    }
    // A shared node keeps its own device request; a variable goes to its parameter server.
    // (An asynchronous replica's own update goes to its variable's server.)
    std::string device = DeviceIn(node.requested_device(), r);
    if (!per_replica_[id]) {
      auto server = server_of_.find(id);
      device = server != server_of_.end() ? server->second : node.requested_device();
    } else if (async() && node.op_def() != nullptr && node.op_def()->stateful) {
      for (const Endpoint& in : node.inputs()) {
        auto server = server_of_.find(in.node);
        if (server != server_of_.end()) device = server->second;
      }
    }
    Scope s = root_.WithOpName(Name(id, r)).WithDevice(device);
    if (!control.empty()) s = s.WithControlDependencies(control);
    AttrMap attrs = node.attrs();
    if (node.role() == OpRole::kVariable && r > 0 && !ps_mode()) {
      // A mirrored copy: checkpoints hold replica 0's value once (runtime/checkpoint_check.h).
      attrs.erase("mirror_of");
      attrs.emplace("mirror_of", Name(id, 0));
    }
    const int copy = s.AddNode(node.op(), inputs, std::move(attrs));
    RETURN_IF_ERROR(root_.status());
    if (!node.colocation_group().empty()) {
      root_.graph_ptr()->SetColocationGroup(
          copy, r == 0 ? node.colocation_group()
                       : fmt::format("replica{}/{}", r, node.colocation_group()));
    }
    added_[r][id] = copy;
    std::vector<Output> outs;
    for (int k = 0; k < node.num_outputs(); ++k) outs.push_back(root_.OutputOf(copy, k));
    out_[r][id] = std::move(outs);
    return Status::OK();
  }

  // Packs the gradients into buckets and replaces each with its mean over replicas.
  Status AllReduceGradients() {
    // Each gradient once, in the order the backward pass makes them (node ids of the single
    // graph grow as autodiff adds them, last layer first).
    struct Grad {
      Endpoint at;
      std::vector<GradUse> uses;
    };
    std::map<std::pair<int, int>, size_t> index;
    std::vector<Grad> grads;
    for (const GradUse& use : grad_uses_) {
      const Endpoint& at = g_.node(use.node).inputs()[use.input];
      auto [it, fresh] = index.try_emplace({at.node, at.index}, grads.size());
      if (fresh) grads.push_back({at, {}});
      grads[it->second].uses.push_back(use);
    }
    std::stable_sort(grads.begin(), grads.end(),
                     [](const Grad& a, const Grad& b) { return a.at.node < b.at.node; });
    if (o_.first_bucket_bytes <= 0 || o_.bucket_bytes <= 0) {
      return InvalidArgument("Replicate: bucket sizes must be positive ({} and {} given)",
                             o_.first_bucket_bytes, o_.bucket_bytes);
    }
    // Buckets: consecutive gradients of one dtype and one device up to the bucket's size; a
    // gradient of own_all_reduce_bytes or more alone (packing it would only copy it twice more).
    std::vector<std::vector<size_t>> buckets;
    int64_t filled = 0;
    DType dtype = DType::kInvalid;
    const std::string* device = nullptr;  // the last bucket's (replica 0's)
    bool alone = false;                   // the last bucket holds one big gradient
    for (size_t i = 0; i < grads.size(); ++i) {
      const Node& p = g_.node(grads[i].at.node);
      const int64_t bytes = p.output_shape(grads[i].at.index).num_elements() *
                            DTypeSize(p.output_dtype(grads[i].at.index));
      const int64_t cap = buckets.size() <= 1 ? o_.first_bucket_bytes : o_.bucket_bytes;
      const bool big = o_.own_all_reduce_bytes > 0 && bytes >= o_.own_all_reduce_bytes;
      const std::string* on = &DeviceIn(p.requested_device(), 0);
      if (buckets.empty() || p.output_dtype(grads[i].at.index) != dtype || *on != *device || big ||
          alone || (filled > 0 && filled + bytes > cap)) {
        buckets.emplace_back();
        filled = 0;
        dtype = p.output_dtype(grads[i].at.index);
        device = on;
      }
      buckets.back().push_back(i);
      filled += bytes;
      alone = big;
    }
    buckets_ = static_cast<int>(buckets.size());
    for (size_t b = 0; b < buckets.size(); ++b) {
      const Scope scope = root_.WithNameScope(fmt::format("gradient_bucket{}", b));
      std::vector<int64_t> sizes;
      for (size_t i : buckets[b]) {
        sizes.push_back(g_.node(grads[i].at.node).output_shape(grads[i].at.index).num_elements());
      }
      // Each replica's bucket: its gradients flattened end to end, on its device for them.
      const std::string& requested = g_.node(grads[buckets[b][0]].at.node).requested_device();
      std::vector<std::string> devices;
      for (int r = 0; r < n_; ++r) devices.push_back(DeviceIn(requested, r));
      std::vector<Output> packed;
      for (int r = 0; r < n_; ++r) {
        const Scope on = scope.WithDevice(devices[r]);
        std::vector<Output> flat;
        for (size_t i : buckets[b]) {
          const auto& outs = out_[r][grads[i].at.node];
          if (grads[i].at.index >= static_cast<int>(outs.size())) {
            return Internal("Replicate: a gradient of bucket {} has no copy in replica {}", b, r);
          }
          flat.push_back(Reshape(on, outs[grads[i].at.index], {-1}));
        }
        packed.push_back(flat.size() == 1 ? flat[0] : Concat(on, flat, 0));
      }
      std::vector<Output> mean =
          n_ == 1 ? packed
                  : AllReduce(scope, packed, devices, {Reduction::kMean, o_.chunk_bytes, o_.hosts});
      RETURN_IF_ERROR(root_.status());
      for (int r = 0; r < n_; ++r) {
        const Scope on = scope.WithDevice(devices[r]);
        std::vector<Output> parts =
            sizes.size() == 1 ? std::vector<Output>{mean[r]} : SplitV(on, mean[r], sizes, 0);
        for (size_t k = 0; k < buckets[b].size() && k < parts.size(); ++k) {
          const Grad& grad = grads[buckets[b][k]];
          Output shaped =
              Reshape(on, parts[k], g_.node(grad.at.node).output_shape(grad.at.index).dim_vector());
          for (const GradUse& use : grad.uses) {
            auto& slot = reduced_[{use.node, use.input}];
            slot.resize(n_);
            slot[r] = shaped;
          }
        }
      }
      RETURN_IF_ERROR(root_.status());
    }
    return Status::OK();
  }

  // The original names of grouped and averaged nodes, over all replicas' copies.
  Status AddGroups() {
    for (int id : grouped_) {
      std::vector<Output> copies;
      for (int r = 0; r < n_; ++r) copies.push_back(root_.OutputOf(added_[r][id]));
      NoOp(root_.WithOpName(g_.node(id).name()).WithControlDependencies(copies));
    }
    for (int id : averaged_) {
      std::vector<Output> copies;
      for (int r = 0; r < n_; ++r) copies.push_back(out_[r][id][0]);
      const Scope first = root_.WithDevice(DeviceIn(g_.node(id).requested_device(), 0));
      const DType dtype = g_.node(id).output_dtype(0);
      Output sum = n_ == 1 ? copies[0] : AddN(first, copies);
      Mul(first.WithOpName(g_.node(id).name()), sum, ScalarConst(first, dtype, 1.0 / n_));
    }
    return root_.status();
  }

  // A NoOp assigning replica 0's value of every variable to the other replicas' copies.
  Status AddSync() {
    const std::string name = FreeName("replica_sync");
    std::vector<Output> assigns;
    for (int id = 0; id < g_.num_nodes(); ++id) {
      if (g_.node(id).role() != OpRole::kVariable) continue;
      for (int r = 1; r < n_; ++r) {
        // Through an Identity on the first device: an Assign is placed with every Variable it
        // reads, and the two copies live on different devices.
        const std::string& requested = g_.node(id).requested_device();
        const Scope on = root_.WithDevice(DeviceIn(requested, r));
        const size_t k = assigns.size();
        Output value = Identity(
            root_.WithOpName(fmt::format("{}/read_{}", name, k)).WithDevice(DeviceIn(requested, 0)),
            out_[0][id][0]);
        assigns.push_back(
            Assign(on.WithOpName(fmt::format("{}/sync_{}", name, k)), out_[r][id][0], value));
      }
    }
    NoOp(root_.WithOpName(name).WithControlDependencies(assigns));
    sync_name_ = name;
    return root_.status();
  }

  const Graph& g_;
  const ReplicateOptions& o_;
  const int n_;
  std::map<std::string, int> mapped_;  // replica_devices[0][k] (CanonicalDevice) -> k
  std::set<std::string> whole_reads_;  // Concats standing for split variables
  std::map<std::string, int> split_;   // split variable -> its blocks
  Scope root_ = Scope::NewRootScope();
  std::vector<std::vector<std::vector<Output>>> out_;  // [replica][node] -> outputs
  std::vector<std::vector<int>> added_;                // [replica][node] -> id in the new graph
  std::set<int> averaged_, grouped_;
  std::vector<bool> reduced_reader_;
  std::vector<bool> per_replica_;         // copied into every replica (else kept once)
  std::map<int, std::string> server_of_;  // variable -> its parameter server
  std::vector<GradUse> grad_uses_;
  std::map<std::pair<int, int>, std::vector<Output>> reduced_;  // (node, input) -> per replica
  int buckets_ = 0;
  std::string sync_name_;
  // Backup workers.
  std::vector<std::vector<Output>> slot_assigns_;  // per replica
  std::vector<Output> slot_inits_;
  std::vector<std::string> replica_targets_;
  std::string apply_target_, weights_feed_, init_target_;
};

}  // namespace

std::string ReplicaName(const std::string& name, int replica) {
  return replica == 0 ? name : fmt::format("replica{}/{}", replica, name);
}

Result<ReplicatedGraph> Replicate(const Graph& single, const ReplicateOptions& options) {
  if (options.devices.empty()) return InvalidArgument("Replicate: no devices given");
  if (!options.hosts.empty() && options.hosts.size() != options.devices.size()) {
    return InvalidArgument("Replicate: {} devices but {} hosts", options.devices.size(),
                           options.hosts.size());
  }
  if (!options.replica_devices.empty()) {
    const auto& lists = options.replica_devices;
    if (lists.size() != options.devices.size()) {
      return InvalidArgument("Replicate: {} devices but {} lists of replica devices",
                             options.devices.size(), lists.size());
    }
    if (!options.parameter_servers.empty()) {
      return InvalidArgument(
          "Replicate: replicas over several devices (replica_devices) need all-reduce, not "
          "parameter servers");
    }
    std::set<std::string> seen;
    for (size_t r = 0; r < lists.size(); ++r) {
      if (lists[r].size() != lists[0].size()) {
        return InvalidArgument("Replicate: replica {} has {} devices, replica 0 {}", r,
                               lists[r].size(), lists[0].size());
      }
      for (const std::string& d : lists[r]) {
        if (!seen.insert(CanonicalDevice(d)).second) {
          return InvalidArgument("Replicate: device '{}' is given twice in replica_devices", d);
        }
      }
    }
  }
  if (options.mode != ReplicateOptions::Mode::kSync && options.parameter_servers.empty()) {
    return InvalidArgument(
        "Replicate: the asynchronous and bounded-staleness modes need parameter servers (with "
        "all-reduce every replica applies the same mean)");
  }
  if (options.backup_workers != 0 &&
      (options.parameter_servers.empty() || options.mode != ReplicateOptions::Mode::kSync ||
       options.backup_workers < 0 ||
       options.backup_workers >= static_cast<int>(options.devices.size()))) {
    return InvalidArgument(
        "Replicate: {} backup workers need synchronous parameter servers and fewer backups than "
        "the {} replicas",
        options.backup_workers, options.devices.size());
  }
  if (options.mode == ReplicateOptions::Mode::kBoundedStaleness && options.staleness < 0) {
    return InvalidArgument("Replicate: staleness must be at least 0 ({} given)", options.staleness);
  }
  if (options.parameter_servers.size() >= 2 && options.max_variable_bytes > 0) {
    Graph copy = single;
    if (!copy.validated()) RETURN_IF_ERROR(copy.Validate().WithPrefix("Replicate: "));
    ASSIGN_OR_RETURN(SplitVariables split,
                     SplitVariablesIntoRowBlocks(copy, options.max_variable_bytes));
    return Replicator(split.graph, options, &split).Run();
  }
  if (single.validated()) return Replicator(single, options, nullptr).Run();
  Graph copy = single;  // Validate orders the nodes topologically
  RETURN_IF_ERROR(copy.Validate().WithPrefix("Replicate: "));
  return Replicator(copy, options, nullptr).Run();
}

}  // namespace dflow::ops
