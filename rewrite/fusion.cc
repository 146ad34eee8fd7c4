#include "rewrite/fusion.h"

#include <algorithm>
#include <unordered_map>

#include "rewrite/control_inputs.h"

namespace dflow::ops {
namespace {

struct Chain {
  int head, bias_add, relu;  // node ids; relu -1 when none
  InputRef bias;
};

class Fuser {
 public:
  Fuser(const Graph& g, const std::vector<int>& keep, const std::function<bool(const char*)>& has)
      : g_(g), consumers_(g.Consumers()), pinned_(g.num_nodes(), false), has_(has) {
    for (int k : keep) pinned_[k] = true;
    // A node others wait on through a control edge keeps its identity too.
    for (int i = 0; i < g.num_nodes(); ++i) {
      for (auto [consumer, slot] : consumers_[i]) pinned_[i] = pinned_[i] || slot < 0;
    }
  }

  Result<FusedGraph> Run() {
    std::vector<int> role(g_.num_nodes(), 0);  // 1: folded away, 2: replaced by a fused node
    std::vector<Chain> chains;
    std::vector<int> chain_of(g_.num_nodes(), -1);
    std::unordered_map<int, NodeDef> updates;  // ApplySGD id -> its fused replacement
    FusedGraph out{Graph(&g_.registry()), {}};
    for (int id : g_.topological_order()) {
      if (role[id] != 0) continue;
      if (auto grad = MatchSgd(id); grad && role[*grad] == 0) {
        role[*grad] = 1;
        role[id] = 3;
        updates.emplace(id, SgdDef(id, *grad, &out.stats));
        continue;
      }
      if (auto product = MatchAccumulate(id); product && role[product->first] == 0) {
        role[product->first] = 1;
        role[id] = 3;
        updates.emplace(id, AccumulateDef(id, product->first, product->second, &out.stats));
        continue;
      }
      if (auto pool = MatchPool(id);
          pool && role[pool->grad] == 0 && (pool->relu < 0 || role[pool->relu] == 0)) {
        role[id] = 3;
        updates.emplace(id, PoolDefs(*pool, &out.stats, &role, &updates));
        continue;
      }
      auto chain = Match(id);
      if (!chain) continue;
      int tail = chain->relu >= 0 ? chain->relu : chain->bias_add;
      role[chain->head] = 1;
      if (chain->relu >= 0) role[chain->bias_add] = 1;
      role[tail] = 2;
      chain_of[tail] = static_cast<int>(chains.size());
      chains.push_back(*chain);
    }
    for (int id = 0; id < g_.num_nodes(); ++id) {
      if (role[id] == 1) continue;
      NodeDef def = role[id] == 2   ? FusedDef(chains[chain_of[id]], &out.stats)
                    : role[id] == 3 ? std::move(updates.at(id))
                                    : g_.node(id).def();
      RETURN_IF_ERROR(out.graph.AddNode(std::move(def)).status());
    }
    RETURN_IF_ERROR(out.graph.Validate());
    return out;
  }

 private:
  // The single consumer of `id`'s output 0 when that is its only use and `id` is not pinned.
  std::optional<int> SoleConsumer(int id) const {
    if (pinned_[id] || consumers_[id].size() != 1) return std::nullopt;
    return consumers_[id][0].first;
  }

  bool SamePlace(const Node& a, const Node& b) const {
    return a.requested_device() == b.requested_device() &&
           a.colocation_group() == b.colocation_group();
  }

  std::optional<Chain> Match(int id) const {
    const Node& head = g_.node(id);
    const OpFusion& f = head.op_def()->fusion;
    if (f.kind != OpFusion::Kind::kEpilogue || !HasKernel(f.fused_op) ||
        head.output_dtype(0) != DType::kF32) {
      return std::nullopt;
    }
    auto next_id = SoleConsumer(id);
    if (!next_id) return std::nullopt;
    const Node& next = g_.node(*next_id);
    if (!SamePlace(head, next)) return std::nullopt;
    Chain chain{id, *next_id, -1, {}};
    if (next.op_def()->epilogue != f.bias) return std::nullopt;
    if (f.bias == Epilogue::kBiasAdd) {
      if (next.inputs()[0].node != id) return std::nullopt;
      chain.bias = next.def().inputs[1];
    } else {
      // A per-channel Add, on either side when the Add is commutative.
      int side = next.inputs()[0].node == id ? 1 : 0;
      if (side == 0 && !next.op_def()->commutative) return std::nullopt;
      const Endpoint& b = next.inputs()[side];
      const Shape& bias = g_.node(b.node).output_shape(b.index);
      const Shape& y = head.output_shape(0);
      if (y.rank() != 4 || y[1] <= 0 || !IsChannelBias(bias, y[1])) return std::nullopt;
      chain.bias = next.def().inputs[side];
    }
    if (next.output_dtype(0) != DType::kF32) return std::nullopt;
    if (auto relu = SoleConsumer(*next_id)) {
      const Node& r = g_.node(*relu);
      if (r.op_def()->epilogue == Epilogue::kRelu && SamePlace(head, r)) chain.relu = *relu;
    }
    return chain;
  }

  struct PoolChain {
    int pool, grad, relu;  // relu: a ReluGrad(grad, x) folded in, -1 when none
  };

  // MaxPool(x) whose only gradient is MaxPoolGrad(x, dy), and maybe ReluGrad(that, x).
  std::optional<PoolChain> MatchPool(int id) const {
    const Node& pool = g_.node(id);
    const OpFusion& f = pool.op_def()->fusion;
    if (f.kind != OpFusion::Kind::kArgmax || !HasKernel(f.fused_op) ||
        !HasKernel(f.fused_partner)) {
      return std::nullopt;
    }
    const Endpoint x = pool.inputs()[0];
    const Shape& xs = g_.node(x.node).output_shape(x.index);
    auto k = std::get<std::vector<int64_t>>(*pool.FindAttr("ksize"));
    if (xs.unknown_rank() || xs.rank() != 4 || xs[2] < 0 || xs[3] < 0 || k[0] > 256 || k[1] > 256 ||
        k[0] * k[1] > 256) {
      return std::nullopt;
    }
    std::optional<int> grad;
    for (auto [consumer, slot] : consumers_[x.node]) {
      const Node& c = g_.node(consumer);
      if (slot != 0 || c.op_def()->gradient_of != pool.op() || c.inputs()[0] != x) continue;
      bool same_window = true;
      for (const char* a : {"ksize", "strides", "pads"}) {
        same_window = same_window && std::get<std::vector<int64_t>>(*c.FindAttr(a)) ==
                                         std::get<std::vector<int64_t>>(*pool.FindAttr(a));
      }
      if (!same_window || grad || pinned_[consumer] || !SamePlace(pool, c)) {
        return std::nullopt;
      }
      grad = consumer;
    }
    if (!grad) return std::nullopt;
    PoolChain chain{id, *grad, -1};
    if (auto r = SoleConsumer(*grad)) {
      const Node& rg = g_.node(*r);
      if (rg.op_def()->epilogue == Epilogue::kReluGrad && rg.inputs()[0] == Endpoint{*grad, 0} &&
          rg.inputs()[1] == x && SamePlace(pool, rg)) {
        chain.relu = *r;
      }
    }
    return chain;
  }

  // The pool's replacement; the gradient's (or the ReluGrad's) goes into `updates`.
  NodeDef PoolDefs(const PoolChain& c, FusionStats* stats, std::vector<int>* role,
                   std::unordered_map<int, NodeDef>* updates) const {
    const Node& pool = g_.node(c.pool);
    const Node& grad = g_.node(c.grad);
    NodeDef p = pool.def();
    p.op = pool.op_def()->fusion.fused_op;
    const Endpoint x = pool.inputs()[0];
    const Shape& xs = g_.node(x.node).output_shape(x.index);
    int tail = c.relu >= 0 ? c.relu : c.grad;
    NodeDef g = g_.node(tail).def();
    g.op = pool.op_def()->fusion.fused_partner;
    g.inputs = {grad.def().inputs[1], InputRef{pool.name(), 1}, InputRef{pool.name(), 0}};
    g.attrs = pool.attrs();
    g.attrs["input_hw"] = std::vector<int64_t>{xs[2], xs[3]};
    g.attrs["relu"] = c.relu >= 0;
    if (c.relu >= 0) {
      (*role)[c.grad] = 1;
      for (const auto& ctl : grad.def().control_inputs) g.control_inputs.push_back(ctl);
      stats->pool_relu++;
    }
    (*role)[tail] = 3;
    updates->emplace(tail, std::move(g));
    stats->pool++;
    return p;
  }

  // ApplySGD(var, lr, MatMul(a, b)) whose gradient nobody else reads: returns the MatMul's id.
  std::optional<int> MatchSgd(int id) const {
    const Node& update = g_.node(id);
    const OpFusion& f = update.op_def()->fusion;
    if (f.kind != OpFusion::Kind::kAbsorbGradient || !HasKernel(f.fused_op) ||
        update.output_dtype(0) != DType::kF32) {
      return std::nullopt;
    }
    int grad = update.inputs()[f.gradient_input].node;
    const Node& mm = g_.node(grad);
    if (!mm.op_def()->fusion.absorbable || SoleConsumer(grad) != id) return std::nullopt;
    if (!mm.requested_device().empty() && mm.requested_device() != update.requested_device()) {
      return std::nullopt;
    }
    const Shape& var = g_.node(update.inputs()[0].node).output_shape(0);
    if (!var.fully_defined() || var != mm.output_shape(0)) return std::nullopt;
    return grad;
  }

  // Add(x, MatMul(a, b)) (either side) of one 2-D shape, the MatMul read by nothing else: the
  // MatMul's id and the side of x.
  std::optional<std::pair<int, int>> MatchAccumulate(int id) const {
    const Node& add = g_.node(id);
    const OpFusion& f = add.op_def()->fusion;
    if (f.kind != OpFusion::Kind::kAccumulate || !HasKernel(f.fused_op) ||
        add.output_dtype(0) != DType::kF32 || add.num_inputs() != 2) {
      return std::nullopt;
    }
    const Shape& sum = add.output_shape(0);
    if (!sum.fully_defined() || sum.rank() != 2) return std::nullopt;
    for (int side : {1, 0}) {
      const Endpoint& in = add.inputs()[side];
      const Endpoint& other = add.inputs()[1 - side];
      const Node& mm = g_.node(in.node);
      if (!mm.op_def()->fusion.absorbable || in.index != 0 || SoleConsumer(in.node) != id ||
          !SamePlace(mm, add) || mm.output_dtype(0) != DType::kF32 || mm.output_shape(0) != sum ||
          g_.node(other.node).output_shape(other.index) != sum) {
        continue;
      }
      return std::make_pair(in.node, 1 - side);
    }
    return std::nullopt;
  }

  NodeDef AccumulateDef(int add_id, int mm_id, int addend_side, FusionStats* stats) const {
    const Node& add = g_.node(add_id);
    const Node& mm = g_.node(mm_id);
    NodeDef def = add.def();
    def.op = add.op_def()->fusion.fused_op;
    def.inputs = {add.def().inputs[addend_side], mm.def().inputs[0], mm.def().inputs[1]};
    def.attrs["transpose_a"] = *mm.FindAttr("transpose_a");
    def.attrs["transpose_b"] = *mm.FindAttr("transpose_b");
    MergeControlInputs(g_, {mm_id}, &def);
    stats->accumulate++;
    return def;
  }

  NodeDef SgdDef(int update_id, int grad_id, FusionStats* stats) const {
    const Node& update = g_.node(update_id);
    const Node& mm = g_.node(grad_id);
    NodeDef def = update.def();
    def.op = update.op_def()->fusion.fused_op;
    def.inputs = {update.def().inputs[0], update.def().inputs[1], mm.def().inputs[0],
                  mm.def().inputs[1]};
    def.attrs["transpose_a"] = *mm.FindAttr("transpose_a");
    def.attrs["transpose_b"] = *mm.FindAttr("transpose_b");
    MergeControlInputs(g_, {grad_id}, &def);
    stats->sgd++;
    return def;
  }

  // [C, 1, 1] or [1, C, 1, 1].
  static bool IsChannelBias(const Shape& s, int64_t c) {
    if (s.rank() == 3) return s[0] == c && s[1] == 1 && s[2] == 1;
    if (s.rank() == 4) return s[0] == 1 && s[1] == c && s[2] == 1 && s[3] == 1;
    return false;
  }

  NodeDef FusedDef(const Chain& c, FusionStats* stats) const {
    const Node& head = g_.node(c.head);
    const Node& tail = g_.node(c.relu >= 0 ? c.relu : c.bias_add);
    NodeDef def;
    def.name = tail.name();
    def.op = head.op_def()->fusion.fused_op;
    def.inputs = {head.def().inputs[0], head.def().inputs[1], c.bias};
    def.attrs = head.attrs();
    def.attrs["activation"] = std::string(c.relu >= 0 ? "Relu" : "");
    def.device = head.requested_device();
    def.colocation_group = head.colocation_group();
    MergeControlInputs(g_, {c.head, c.bias_add, c.relu}, &def);
    (head.op_def()->fusion.bias == Epilogue::kBiasAdd ? stats->matmul : stats->conv)++;
    if (c.relu >= 0) stats->relu++;
    return def;
  }

  const Graph& g_;
  std::vector<std::vector<std::pair<int, int>>> consumers_;
  std::vector<bool> pinned_;
  // Whether the device has a kernel for a fused op (null: every fused op is wanted).
  std::function<bool(const char*)> has_;
  bool HasKernel(const std::string& op) const { return !has_ || has_(op.c_str()); }
};

}  // namespace

Result<FusedGraph> FuseEpilogues(const Graph& graph, const std::vector<int>& keep,
                                 const std::function<bool(const char* op)>& has_kernel) {
  if (!graph.validated()) return FailedPrecondition("FuseEpilogues needs a validated graph");
  return Fuser(graph, keep, has_kernel).Run();
}

}  // namespace dflow::ops
