#include "rewrite/channel_blocks.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "rewrite/control_inputs.h"

namespace dflow::ops {
namespace {

class Blocker {
 public:
  Blocker(const Graph& g, const std::vector<int>& keep, int block)
      : g_(g),
        block_(block),
        consumers_(g.Consumers()),
        pinned_(g.num_nodes(), false),
        blocked_(g.num_nodes(), false),
        position_(g.num_nodes(), 0) {
    for (int k : keep) pinned_[k] = true;
    for (int i = 0; i < g.num_nodes(); ++i) {
      for (auto [consumer, slot] : consumers_[i]) pinned_[i] = pinned_[i] || slot < 0;
    }
    const auto& order = g.topological_order();
    for (size_t i = 0; i < order.size(); ++i) position_[order[i]] = static_cast<int>(i);
  }

  Result<BlockedGraph> Run() {
    const auto& order = g_.topological_order();
    for (int id : order) {
      blocked_[id] = IsConv(id) || IsElementwise(id) || IsPool(id) || IsGlobalMean(id);
    }
    // Chains folded into their convolution: the tail node becomes the blocked convolution.
    std::vector<int> folded(g_.num_nodes(), 0);
    std::vector<std::optional<Chain>> chain_at(g_.num_nodes());
    for (int id : order) {
      if (!IsConv(id)) continue;
      Chain c = ChainFrom(id, folded, chain_at);
      for (int n : c.folded) folded[n] = 1;
      chain_at[c.tail] = c;
    }
    BlockedGraph out{Graph(&g_.registry()), {}};
    std::vector<bool> unblocked_made(g_.num_nodes(), false);
    for (int id : order) {
      if (folded[id]) continue;
      const Node& node = g_.node(id);
      NodeDef def;
      // What each input of `def` is, with whether the input slot takes a blocked tensor.
      std::vector<std::pair<Endpoint, bool>> ins;
      if (chain_at[id]) {
        const Chain& c = *chain_at[id];
        def = ConvDef(c, &out.stats);
        const Node& conv = g_.node(c.conv);
        ins = {{conv.inputs()[0], true}, {conv.inputs()[1], false}, {conv.inputs()[2], false}};
        if (c.residual) ins.push_back({*c.residual, true});
        def.attrs["x_blocked"] = Blocked(conv.inputs()[0]);
      } else {
        def = node.def();
        for (const Endpoint& e : node.inputs()) ins.push_back({e, blocked_[id]});
        if (IsPool(id)) {
          def.op = "_Blocked" + node.op();
          def.attrs["channels"] = ShapeOf(node.inputs()[0])[1];
          out.stats.pools++;
        } else if (IsGlobalMean(id)) {
          // An average pool whose window is the whole image, so only the [N, C, 1, 1] means are
          // unblocked, not the image.
          const Shape& x = ShapeOf(node.inputs()[0]);
          def.op = "_BlockedAvgPool";
          def.attrs = {{"T", DType::kF32},
                       {"ksize", std::vector<int64_t>{x[2], x[3]}},
                       {"strides", std::vector<int64_t>{1, 1}},
                       {"pads", std::vector<int64_t>{0, 0, 0, 0}},
                       {"channels", x[1]}};
          out.stats.pools++;
        } else if (blocked_[id]) {
          out.stats.elementwise++;
        }
      }
      def.inputs.clear();
      for (const auto& [e, takes_blocked] : ins) {
        const Node& p = g_.node(e.node);
        if (!Blocked(e) || takes_blocked) {
          def.inputs.push_back({p.name(), e.index});
          continue;
        }
        const std::string name = p.name() + "/_unblocked";
        if (!unblocked_made[e.node]) {
          unblocked_made[e.node] = true;
          NodeDef u;
          u.name = name;
          u.op = "_UnblockChannels";
          u.inputs = {{p.name(), 0}};
          u.attrs["T"] = DType::kF32;
          u.attrs["channels"] = p.output_shape(0)[1];
          u.device = p.requested_device();
          u.colocation_group = p.colocation_group();
          RETURN_IF_ERROR(out.graph.AddNode(std::move(u)).status());
          out.stats.unblocks++;
        }
        def.inputs.push_back({name, 0});
      }
      RETURN_IF_ERROR(out.graph.AddNode(std::move(def)).status());
    }
    RETURN_IF_ERROR(out.graph.Validate());
    return FuseDepthwise(std::move(out));
  }

  // An expanding 1x1 _BlockedConv2D read only by a depthwise 3x3 one (stride 1 or 2, padding
  // 1, no residual either way): one _BlockedConvDw named as the depthwise one.
  Result<BlockedGraph> FuseDepthwise(BlockedGraph in) const {
    const Graph& g = in.graph;
    const auto consumers = g.Consumers();
    auto ints = [&g](int id, const char* attr) {
      return std::get<std::vector<int64_t>>(*g.node(id).FindAttr(attr));
    };
    auto kept = [&](int id) {
      auto original = g_.FindNode(g.node(id).name());
      if (original && pinned_[*original]) return true;
      for (auto [consumer, slot] : consumers[id]) {
        if (slot < 0) return true;
      }
      return false;
    };
    std::vector<int> partner(g.num_nodes(), -1);  // the 1x1 convolution <-> the depthwise one
    int pairs = 0;
    for (int id : g.topological_order()) {
      const Node& dw = g.node(id);
      if (dw.op() != "_BlockedConv2D" || dw.inputs().size() != 3 ||
          !std::get<bool>(*dw.FindAttr("x_blocked"))) {
        continue;
      }
      const Shape& dww = g.node(dw.inputs()[1].node).output_shape(dw.inputs()[1].index);
      const int64_t s = ints(id, "strides")[0];
      if (!dww.fully_defined() || dww.rank() != 4 || dww[1] != 1 || dww[2] != 3 || dww[3] != 3 ||
          std::get<int64_t>(*dw.FindAttr("groups")) != dww[0] || (s != 1 && s != 2) ||
          ints(id, "strides") != std::vector<int64_t>{s, s} ||
          ints(id, "pads") != std::vector<int64_t>{1, 1, 1, 1} ||
          ints(id, "dilations") != std::vector<int64_t>{1, 1}) {
        continue;
      }
      const int a = dw.inputs()[0].node;
      const Node& pw = g.node(a);
      if (dw.inputs()[0].index != 0 || pw.op() != "_BlockedConv2D" || pw.inputs().size() != 3 ||
          !std::get<bool>(*pw.FindAttr("x_blocked")) || consumers[a].size() != 1 || kept(a) ||
          partner[a] >= 0 || pw.requested_device() != dw.requested_device() ||
          pw.colocation_group() != dw.colocation_group()) {
        continue;
      }
      const Shape& pww = g.node(pw.inputs()[1].node).output_shape(pw.inputs()[1].index);
      if (!pww.fully_defined() || pww.rank() != 4 || pww[0] != dww[0] || pww[2] != 1 ||
          pww[3] != 1 || std::get<int64_t>(*pw.FindAttr("groups")) != 1 ||
          ints(a, "strides") != std::vector<int64_t>{1, 1} ||
          ints(a, "pads") != std::vector<int64_t>{0, 0, 0, 0} ||
          ints(a, "dilations") != std::vector<int64_t>{1, 1}) {
        continue;
      }
      partner[a] = id;
      partner[id] = a;
      pairs++;
    }
    if (pairs == 0) return in;
    BlockedGraph out{Graph(&g.registry()), in.stats};
    out.stats.depthwise_fused = pairs;
    for (int id : g.topological_order()) {
      const Node& n = g.node(id);
      if (partner[id] >= 0 && n.inputs()[0].node != partner[id]) continue;  // the 1x1, folded
      NodeDef def = n.def();
      if (partner[id] >= 0) {
        const Node& pw = g.node(partner[id]);
        def = pw.def();
        def.name = n.name();
        def.op = "_BlockedConvDw";
        def.inputs.push_back(n.def().inputs[1]);
        def.inputs.push_back(n.def().inputs[2]);
        def.attrs["dw_stride"] = ints(id, "strides")[0];
        def.attrs["dw_activation"] = *n.FindAttr("activation");
        def.attrs["dw_clip_min"] = *n.FindAttr("clip_min");
        def.attrs["dw_clip_max"] = *n.FindAttr("clip_max");
        def.device = n.requested_device();
        def.colocation_group = n.colocation_group();
        def.control_inputs.clear();
        MergeControlInputs(g, {partner[id], id}, &def);
      }
      RETURN_IF_ERROR(out.graph.AddNode(std::move(def)).status());
    }
    RETURN_IF_ERROR(out.graph.Validate());
    return out;
  }

 private:
  struct Chain {
    int conv = -1, tail = -1;
    std::optional<Endpoint> residual;
    std::string activation;
    float lo = 0, hi = 0;
    std::vector<int> folded;  // the chain's nodes but the tail
  };

  bool Blocked(const Endpoint& e) const { return e.index == 0 && blocked_[e.node]; }

  const Shape& ShapeOf(const Endpoint& e) const { return g_.node(e.node).output_shape(e.index); }

  // _FusedConv2D in f32 with a filter of known shape, on channels the blocked primitives take.
  bool IsConv(int id) const {
    const Node& n = g_.node(id);
    if (n.op() != "_FusedConv2D" || pinned_[id] || n.output_dtype(0) != DType::kF32) return false;
    const Shape& x = ShapeOf(n.inputs()[0]);
    const Shape& w = ShapeOf(n.inputs()[1]);
    if (x.unknown_rank() || x.rank() != 4 || x[1] <= 0 || !w.fully_defined() || w.rank() != 4) {
      return false;
    }
    const int64_t groups = std::get<int64_t>(*n.FindAttr("groups"));
    const int64_t cg = w[1], og = w[0] / groups;
    return groups == 1 || (cg == 1 && og == 1) || (cg % block_ == 0 && og % block_ == 0);
  }

  // A finite scalar constant.
  std::optional<float> Scalar(const Endpoint& e) const {
    const Node& n = g_.node(e.node);
    if (n.op() != "Const" || n.output_dtype(0) != DType::kF32) return std::nullopt;
    const Tensor& t = std::get<Tensor>(*n.FindAttr("value"));
    if (t.num_elements() != 1 || t.shape().rank() > 4) return std::nullopt;
    const float v = t.data<float>()[0];
    if (!std::isfinite(v)) return std::nullopt;
    return v;
  }

  // MaxPool or AvgPool of a blocked tensor.
  bool IsPool(int id) const {
    const Node& n = g_.node(id);
    return (n.op() == "MaxPool" || n.op() == "AvgPool") && !pinned_[id] &&
           n.output_dtype(0) == DType::kF32 && Blocked(n.inputs()[0]);
  }

  // ReduceMean of a blocked tensor over H and W, dimensions kept (GlobalAveragePool).
  bool IsGlobalMean(int id) const {
    const Node& n = g_.node(id);
    if (n.op() != "ReduceMean" || pinned_[id] || n.output_dtype(0) != DType::kF32 ||
        !Blocked(n.inputs()[0]) || !std::get<bool>(*n.FindAttr("keep_dims"))) {
      return false;
    }
    const Shape& x = ShapeOf(n.inputs()[0]);
    std::vector<int64_t> axes = std::get<std::vector<int64_t>>(*n.FindAttr("axes"));
    for (int64_t& a : axes) a = a < 0 ? a + 4 : a;
    std::sort(axes.begin(), axes.end());
    return axes == std::vector<int64_t>{2, 3} && x[2] > 0 && x[3] > 0;
  }

  bool IsElementwise(int id) const {
    const Node& n = g_.node(id);
    if (pinned_[id] || n.num_outputs() != 1 || n.output_dtype(0) != DType::kF32) return false;
    const std::string& op = n.op();
    if (op == "Relu" || op == "Identity") return Blocked(n.inputs()[0]);
    if (op != "Add" && op != "Sub" && op != "Mul" && op != "Maximum" && op != "Minimum") {
      return false;
    }
    const Endpoint a = n.inputs()[0], b = n.inputs()[1];
    if (Blocked(a) && Blocked(b)) return ShapeOf(a) == ShapeOf(b);
    return (Blocked(a) && Scalar(b)) || (Scalar(a) && Blocked(b));
  }

  std::optional<int> SoleConsumer(int id) const {
    if (pinned_[id] || consumers_[id].size() != 1) return std::nullopt;
    return consumers_[id][0].first;
  }

  // Whether `to` can be reached from `from` along data or control edges.
  bool Reaches(int from, int to) const {
    std::vector<int> stack = {from};
    std::vector<bool> seen(g_.num_nodes(), false);
    while (!stack.empty()) {
      int n = stack.back();
      stack.pop_back();
      if (n == to) return true;
      for (auto [c, slot] : consumers_[n]) {
        if (!seen[c] && position_[c] <= position_[to]) {
          seen[c] = true;
          stack.push_back(c);
        }
      }
    }
    return false;
  }

  // The convolution `id` and what folds into it (none of the nodes another chain took).
  Chain ChainFrom(int id, const std::vector<int>& folded,
                  const std::vector<std::optional<Chain>>& chain_at) const {
    Chain c;
    c.conv = c.tail = id;
    const Node& conv = g_.node(id);
    c.activation = std::get<std::string>(*conv.FindAttr("activation"));
    if (!c.activation.empty()) return c;
    auto next = [&](const char* op) -> std::optional<int> {
      auto n = SoleConsumer(c.tail);
      if (!n || g_.node(*n).op() != op || !blocked_[*n] || folded[*n] || chain_at[*n]) {
        return std::nullopt;
      }
      return n;
    };
    if (auto add = next("Add")) {
      const Node& a = g_.node(*add);
      const Endpoint other = a.inputs()[a.inputs()[0].node == c.tail ? 1 : 0];
      if (Blocked(other) && other.node != c.tail && !Reaches(c.tail, other.node)) {
        c.folded.push_back(c.tail);
        c.tail = *add;
        c.residual = other;
      }
    }
    if (auto relu = next("Relu")) {
      c.folded.push_back(c.tail);
      c.tail = *relu;
      c.activation = "Relu";
    } else if (auto max = next("Maximum")) {
      const Node& mx = g_.node(*max);
      auto lo = Scalar(mx.inputs()[mx.inputs()[0].node == c.tail ? 1 : 0]);
      auto min = SoleConsumer(*max);
      if (lo && min && g_.node(*min).op() == "Minimum" && blocked_[*min]) {
        const Node& mn = g_.node(*min);
        auto hi = Scalar(mn.inputs()[mn.inputs()[0].node == *max ? 1 : 0]);
        if (hi && *lo <= *hi) {
          c.folded.push_back(c.tail);
          c.folded.push_back(*max);
          c.tail = *min;
          c.activation = "Clip";
          c.lo = *lo;
          c.hi = *hi;
        }
      }
    }
    return c;
  }

  NodeDef ConvDef(const Chain& c, ChannelBlockStats* stats) const {
    const Node& conv = g_.node(c.conv);
    const Node& tail = g_.node(c.tail);
    NodeDef def;
    def.name = tail.name();
    def.op = "_BlockedConv2D";
    def.attrs = conv.attrs();
    def.attrs["block"] = static_cast<int64_t>(block_);
    def.attrs["activation"] = c.activation;
    def.attrs["clip_min"] = static_cast<double>(c.lo);
    def.attrs["clip_max"] = static_cast<double>(c.hi);
    def.device = conv.requested_device();
    def.colocation_group = conv.colocation_group();
    std::vector<int> members = c.folded;
    members.push_back(c.tail);
    MergeControlInputs(g_, members, &def);
    stats->convs++;
    if (c.residual) stats->residuals++;
    if (c.activation == "Clip") stats->clips++;
    return def;
  }

  const Graph& g_;
  const int block_;
  std::vector<std::vector<std::pair<int, int>>> consumers_;
  std::vector<bool> pinned_;
  std::vector<bool> blocked_;  // output 0 in the blocked layout
  std::vector<int> position_;  // in the topological order
};

}  // namespace

Result<BlockedGraph> BlockChannels(const Graph& graph, const std::vector<int>& keep, int block) {
  if (!graph.validated()) return FailedPrecondition("BlockChannels needs a validated graph");
  if (block != 8 && block != 16) return InvalidArgument("channel block {} (8 or 16)", block);
  // A training step (a convolution's filter gradient is taken) stays as it is: its backward ops
  // read the forward activations as NCHW, each through an _UnblockChannels of its own.
  for (int i = 0; i < graph.num_nodes(); ++i) {
    if (graph.node(i).op() == "Conv2DBackpropFilter") {
      BlockedGraph same{Graph(&graph.registry()), {}};
      for (int id : graph.topological_order()) {
        RETURN_IF_ERROR(same.graph.AddNode(graph.node(id).def()).status());
      }
      RETURN_IF_ERROR(same.graph.Validate());
      return same;
    }
  }
  return Blocker(graph, keep, block).Run();
}

}  // namespace dflow::ops
