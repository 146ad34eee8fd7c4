#include "rewrite/subgraph_fusion.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>

#include "rewrite/control_inputs.h"

namespace dflow::ops {
namespace {

class SubgraphFuser {
 public:
  SubgraphFuser(const Graph& g, const std::vector<int>& keep,
                const std::function<bool(const char*)>& has)
      : g_(g), consumers_(g.Consumers()), pinned_(g.num_nodes(), false), has_(has) {
    for (int k : keep) pinned_[k] = true;
    for (int i = 0; i < g.num_nodes(); ++i) {
      for (auto [consumer, slot] : consumers_[i]) pinned_[i] = pinned_[i] || slot < 0;
    }
  }

  Result<SubgraphFused> Run() {
    SubgraphFused out{Graph(&g_.registry()), {}};
    removed_.assign(g_.num_nodes(), false);
    for (int id : g_.topological_order()) {
      if (removed_[id] || replaced_.count(id)) continue;
      if (MatchGelu(id, &out.stats) || MatchLayerNorm(id, &out.stats)) continue;
      MatchMatMulBias(id, &out.stats);
    }
    for (int id : g_.topological_order()) {
      if (removed_[id]) continue;
      auto r = replaced_.find(id);
      RETURN_IF_ERROR(
          out.graph.AddNode(r != replaced_.end() ? std::move(r->second) : g_.node(id).def())
              .status());
    }
    RETURN_IF_ERROR(out.graph.Validate());
    return out;
  }

 private:
  const Node& N(int id) const { return g_.node(id); }
  const Shape& ShapeOf(const Endpoint& e) const { return N(e.node).output_shape(e.index); }
  bool HasKernel(const char* op) const { return !has_ || has_(op); }

  // Whether `id` may be folded into a fused node: an f32 node nobody pins, not yet taken, read
  // only by `uses` consumers.
  bool Inner(int id, size_t uses = 1) const {
    return !pinned_[id] && !removed_[id] && !replaced_.count(id) && consumers_[id].size() == uses &&
           N(id).num_outputs() == 1 && N(id).output_dtype(0) == DType::kF32;
  }
  // The node producing input `i` of `id` when it has op `op`.
  std::optional<int> Input(int id, int i, const char* op) const {
    const Endpoint& e = N(id).inputs()[i];
    if (e.index != 0 || N(e.node).op() != op) return std::nullopt;
    return e.node;
  }
  // The value of a scalar f32 constant feeding input `i` of `id`.
  std::optional<float> ScalarInput(int id, int i) const {
    const Node& c = N(N(id).inputs()[i].node);
    if (c.op() != "Const" || c.output_dtype(0) != DType::kF32) return std::nullopt;
    const Tensor& t = std::get<Tensor>(*c.FindAttr("value"));
    if (t.num_elements() != 1) return std::nullopt;
    return t.data<float>()[0];
  }
  bool SamePlace(const std::vector<int>& ids) const {
    for (int id : ids) {
      if (N(id).requested_device() != N(ids[0]).requested_device() ||
          N(id).colocation_group() != N(ids[0]).colocation_group()) {
        return false;
      }
    }
    return true;
  }

  // Replaces the nodes `inner` and `tail` by `def` (named as the tail), keeping their control
  // inputs.
  void Replace(NodeDef def, const std::vector<int>& inner, int tail) {
    def.name = N(tail).name();
    def.device = N(tail).requested_device();
    def.colocation_group = N(tail).colocation_group();
    std::vector<int> all = inner;
    all.push_back(tail);
    MergeControlInputs(g_, all, &def);
    for (int id : inner) removed_[id] = true;
    replaced_.emplace(tail, std::move(def));
  }

  // The side (0 or 1) of binary node `id` whose producer has op `op`, and that producer.
  std::optional<std::pair<int, int>> Side(int id, const char* op) const {
    for (int i = 0; i < 2; ++i) {
      if (auto p = Input(id, i, op)) return std::pair{i, *p};
    }
    return std::nullopt;
  }

  // tail = Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5), the outer Mul's operands either way.
  bool MatchGelu(int tail, SubgraphStats* stats) {
    if (N(tail).op() != "Mul" || N(tail).output_dtype(0) != DType::kF32) return false;
    auto outer = Side(tail, "Mul");
    if (!outer || ScalarInput(tail, 1 - outer->first) != 0.5f) return false;
    const int a = outer->second;
    // a = Mul(x, Add(Erf(...), 1)), either way round (x may itself be an Add).
    std::optional<std::pair<int, int>> e;
    int add = -1;
    Endpoint x;
    for (int side = 0; side < 2 && !e; ++side) {
      auto b = Input(a, side, "Add");
      if (!b) continue;
      auto erf = Side(*b, "Erf");
      if (!erf || ScalarInput(*b, 1 - erf->first) != 1.f) continue;
      e = erf;
      add = *b;
      x = N(a).inputs()[1 - side];
    }
    if (!e) return false;
    auto d = Input(e->second, 0, "Div");
    if (!d || N(*d).inputs()[0] != x) return false;
    auto s = ScalarInput(*d, 1);
    if (!s || std::abs(*s - std::sqrt(2.f)) > 1e-6f) return false;
    std::vector<int> inner = {a, add, e->second, *d};
    for (int id : inner) {
      if (!Inner(id)) return false;
    }
    inner.push_back(tail);
    if (!SamePlace(inner)) return false;
    inner.pop_back();
    NodeDef def;
    def.op = "Gelu";
    def.inputs = {{N(x.node).name(), x.index}};
    def.attrs["T"] = DType::kF32;
    Replace(std::move(def), inner, tail);
    stats->gelu++;
    return true;
  }

  // ReduceMean over the last axis of x, keeping it.
  bool LastAxisMean(int id, const Shape& x) const {
    if (N(id).op() != "ReduceMean" || !std::get<bool>(*N(id).FindAttr("keep_dims"))) return false;
    const auto& axes = std::get<std::vector<int64_t>>(*N(id).FindAttr("axes"));
    const int rank = x.rank();
    return axes.size() == 1 && (axes[0] == rank - 1 || axes[0] == -1);
  }

  // tail = Add(Mul(Mul(d, inv), scale), bias) with d = Sub(x, mean), mean = ReduceMean(x),
  // inv = Rsqrt(Add(ReduceMean(Square(d)), eps)), over x's last axis.
  bool MatchLayerNorm(int tail, SubgraphStats* stats) {
    if (N(tail).op() != "Add" || !HasKernel("_LayerNorm") ||
        N(tail).output_dtype(0) != DType::kF32) {
      return false;
    }
    auto scaled = Side(tail, "Mul");
    if (!scaled) return false;
    const Endpoint bias = N(tail).inputs()[1 - scaled->first];
    auto norm = Side(scaled->second, "Mul");
    if (!norm) return false;
    const Endpoint scale = N(scaled->second).inputs()[1 - norm->first];
    auto sub = Side(norm->second, "Sub");
    auto rsqrt = Side(norm->second, "Rsqrt");
    if (!sub || !rsqrt || sub->first == rsqrt->first) return false;
    const Endpoint x = N(sub->second).inputs()[0];
    auto mean = Input(sub->second, 1, "ReduceMean");
    const Shape& xs = ShapeOf(x);
    if (!mean || N(*mean).inputs()[0] != x || xs.unknown_rank() || xs.rank() < 1 ||
        !LastAxisMean(*mean, xs)) {
      return false;
    }
    const int64_t k = xs[xs.rank() - 1];
    auto eps_add = Input(rsqrt->second, 0, "Add");
    if (!eps_add) return false;
    auto var = Side(*eps_add, "ReduceMean");
    if (!var) return false;
    auto eps = ScalarInput(*eps_add, 1 - var->first);
    auto square = Input(var->second, 0, "Square");
    if (!eps || !square || !LastAxisMean(var->second, xs) ||
        N(*square).inputs()[0] != Endpoint{sub->second, 0}) {
      return false;
    }
    for (const Endpoint& v : {scale, bias}) {
      const Shape& s = ShapeOf(v);
      if (k <= 0 || s.unknown_rank() || s.rank() != 1 || s[0] != k ||
          N(v.node).output_dtype(v.index) != DType::kF32) {
        return false;
      }
    }
    std::vector<int> inner = {*mean,    sub->second,   *square,      var->second,
                              *eps_add, rsqrt->second, norm->second, scaled->second};
    for (int id : inner) {
      if (!Inner(id, id == sub->second ? 2 : 1)) return false;
    }
    inner.push_back(tail);
    if (!SamePlace(inner)) return false;
    inner.pop_back();
    NodeDef def;
    def.op = "_LayerNorm";
    def.inputs = {{N(x.node).name(), x.index},
                  {N(scale.node).name(), scale.index},
                  {N(bias.node).name(), bias.index}};
    def.attrs["T"] = DType::kF32;
    def.attrs["epsilon"] = static_cast<double>(*eps);
    Replace(std::move(def), inner, tail);
    stats->layer_norm++;
    return true;
  }

  // tail = Add(R, bias [N]) with R = Reshape(To)(M) keeping the last dimension N of the 2-D
  // MatMul M: M becomes _FusedMatMul(a, b, bias), R takes the tail's name.
  bool MatchMatMulBias(int tail, SubgraphStats* stats) {
    if (N(tail).op() != "Add" || !HasKernel("_FusedMatMul") ||
        N(tail).output_dtype(0) != DType::kF32) {
      return false;
    }
    for (int side = 0; side < 2; ++side) {
      auto r = Input(tail, side, "Reshape");
      if (!r) r = Input(tail, side, "ReshapeTo");
      if (!r) continue;
      auto m = Input(*r, 0, "MatMul");
      if (!m || !Inner(*r) || !Inner(*m)) continue;
      const Shape& y = N(*m).output_shape(0);
      const Shape& ry = N(*r).output_shape(0);
      const Endpoint bias = N(tail).inputs()[1 - side];
      const Shape& b = ShapeOf(bias);
      if (y.rank() != 2 || y[1] <= 0 || ry.unknown_rank() || ry.rank() < 1 ||
          ry[ry.rank() - 1] != y[1] || b.unknown_rank() || b.rank() != 1 || b[0] != y[1] ||
          N(bias.node).output_dtype(bias.index) != DType::kF32 || !SamePlace({*m, *r, tail})) {
        continue;
      }
      NodeDef fused = N(*m).def();
      fused.op = "_FusedMatMul";
      fused.inputs.push_back({N(bias.node).name(), bias.index});
      fused.attrs["activation"] = std::string();
      replaced_.emplace(*m, std::move(fused));
      Replace(N(*r).def(), {}, tail);
      removed_[*r] = true;
      stats->matmul_bias++;
      return true;
    }
    return false;
  }

  const Graph& g_;
  std::vector<std::vector<std::pair<int, int>>> consumers_;
  std::vector<bool> pinned_;
  std::function<bool(const char*)> has_;
  std::vector<bool> removed_;
  std::unordered_map<int, NodeDef> replaced_;  // node id -> what is emitted in its place
};

}  // namespace

Result<SubgraphFused> FuseSubgraphs(const Graph& graph, const std::vector<int>& keep,
                                    const std::function<bool(const char* op)>& has_kernel) {
  if (!graph.validated()) return FailedPrecondition("FuseSubgraphs needs a validated graph");
  return SubgraphFuser(graph, keep, has_kernel).Run();
}

}  // namespace dflow::ops
