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

  // The first pass puts back the ops; the second (on the first's graph, whose fused ops are
  // nodes now) fuses the attentions they form.
  Result<SubgraphFused> Run(bool attention, SubgraphStats stats = {}) {
    SubgraphFused out{Graph(&g_.registry()), stats};
    removed_.assign(g_.num_nodes(), false);
    for (int id : g_.topological_order()) {
      if (removed_[id] || replaced_.count(id)) continue;
      if (attention) {
        MatchAttention(id, &out.stats);
        continue;
      }
      if (MatchGelu(id, &out.stats) || MatchLayerNorm(id, &out.stats)) continue;
      if (MatchScaledBatchMatMul(id, &out.stats)) continue;
      if (MatchTransposedOperands(id, &out.stats)) continue;
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
    stats->gelu++;
    // x = Reshape(_FusedMatMul) as MatchMatMulBias made it, read by nothing but this GELU (its
    // Div and Mul): the GELU becomes the product's post-op and the Reshape takes its place.
    if (auto m = matmul_behind_.find(x.node);
        m != matmul_behind_.end() && x.index == 0 && !pinned_[x.node] && !removed_[x.node] &&
        consumers_[x.node].size() == 2 && SamePlace({x.node, tail})) {
      NodeDef reshape = std::move(replaced_.at(x.node));
      replaced_.erase(x.node);
      removed_[x.node] = true;
      replaced_.at(m->second).attrs["activation"] = std::string("Gelu");
      Replace(std::move(reshape), inner, tail);
      stats->matmul_gelu++;
      return true;
    }
    NodeDef def;
    def.op = "Gelu";
    def.inputs = {{N(x.node).name(), x.index}};
    def.attrs["T"] = DType::kF32;
    Replace(std::move(def), inner, tail);
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
      matmul_behind_[tail] = *m;
      stats->matmul_bias++;
      return true;
    }
    return false;
  }

  // What is emitted for `id` so far: its replacement, or its own def.
  NodeDef DefOf(int id) const {
    auto r = replaced_.find(id);
    return r != replaced_.end() ? r->second : N(id).def();
  }

  // A BatchMatMul operand Transpose(x, perm) whose perm moves x's last axis to the second last
  // place (an attention's keys, [B, S, H, D] -> [B, H, D, S]): the product reads it transposed
  // instead, so the Transpose keeps the last axis where it is (a copy of whole rows) or, when
  // nothing else is left of it, goes.
  bool MatchTransposedOperands(int id, SubgraphStats* stats) {
    if (N(id).op() != "BatchMatMul" || N(id).output_dtype(0) != DType::kF32) return false;
    NodeDef product = N(id).def();
    for (const char* flag : {"transpose_a", "transpose_b"}) {
      product.attrs[flag] = std::get<bool>(*N(id).FindAttr(flag));
    }
    bool changed = false;
    for (int side = 0; side < 2; ++side) {
      auto t = Input(id, side, "Transpose");
      if (!t || !Inner(*t) || !SamePlace({*t, id})) continue;
      auto perm = std::get<std::vector<int64_t>>(*N(*t).FindAttr("perm"));
      const int64_t r = static_cast<int64_t>(perm.size());
      if (r < 3 || perm[r - 2] != r - 1 || perm[r - 1] == r - 1) continue;
      std::swap(perm[r - 1], perm[r - 2]);
      bool identity = true;
      for (int64_t i = 0; i < r; ++i) identity = identity && perm[i] == i;
      const char* flag = side == 0 ? "transpose_a" : "transpose_b";
      product.attrs[flag] = !std::get<bool>(product.attrs.find(flag)->second);
      if (identity) {
        product.inputs[side] = N(*t).def().inputs[0];
        MergeControlInputs(g_, {*t}, &product);
        removed_[*t] = true;
      } else {
        NodeDef kept = N(*t).def();
        kept.attrs["perm"] = perm;
        replaced_.emplace(*t, std::move(kept));
      }
      changed = true;
      stats->transposed_operands++;
    }
    if (changed) replaced_[id] = std::move(product);
    return changed;
  }

  // tail = Add(Div(BatchMatMul(a, b), c) or Mul(BatchMatMul(a, b), c), m), either way round,
  // with c a scalar constant and m broadcast to the product (the Add's output is the product's
  // shape): _ScaledBatchMatMul(a, b, m) with alpha 1 / c or c.
  bool MatchScaledBatchMatMul(int tail, SubgraphStats* stats) {
    if (N(tail).op() != "Add" || !HasKernel("_ScaledBatchMatMul") ||
        N(tail).output_dtype(0) != DType::kF32) {
      return false;
    }
    for (int side = 0; side < 2; ++side) {
      const int scaled = N(tail).inputs()[side].node;
      const std::string& op = N(scaled).op();
      if ((op != "Div" && op != "Mul") || N(tail).inputs()[side].index != 0 || !Inner(scaled)) {
        continue;
      }
      std::optional<int> product;
      std::optional<float> c;
      for (int i = 0; i < 2 && !product; ++i) {
        if (op == "Div" && i == 1) break;  // the product is the dividend
        const int p = N(scaled).inputs()[i].node;
        if (N(p).op() == "BatchMatMul" && N(scaled).inputs()[i].index == 0 && !pinned_[p] &&
            !removed_[p] && consumers_[p].size() == 1) {
          product = p;
          c = ScalarInput(scaled, 1 - i);
        }
      }
      if (!product || !c || !std::isfinite(*c) || *c == 0) continue;
      const Endpoint mask = N(tail).inputs()[1 - side];
      const Shape& y = ShapeOf({scaled, 0});
      const Shape& m = ShapeOf(mask);
      if (y.unknown_rank() || m.unknown_rank() || m.rank() > y.rank() ||
          N(tail).output_shape(0) != y || N(mask.node).output_dtype(mask.index) != DType::kF32 ||
          !SamePlace({*product, scaled, tail})) {
        continue;
      }
      bool broadcasts = true;
      for (int i = 1; i <= m.rank(); ++i) {
        const int64_t d = m[m.rank() - i], p = y[y.rank() - i];
        broadcasts = broadcasts && (d == 1 || (d >= 0 && d == p) || (d < 0 && p < 0));
      }
      if (!broadcasts) continue;
      NodeDef bmm = DefOf(*product);
      for (const char* flag : {"transpose_a", "transpose_b"}) {
        if (!bmm.attrs.count(flag)) bmm.attrs[flag] = std::get<bool>(*N(*product).FindAttr(flag));
      }
      NodeDef def;
      def.op = "_ScaledBatchMatMul";
      def.inputs = {bmm.inputs[0], bmm.inputs[1], {N(mask.node).name(), mask.index}};
      def.attrs["T"] = DType::kF32;
      def.attrs["transpose_a"] = bmm.attrs.find("transpose_a")->second;
      def.attrs["transpose_b"] = bmm.attrs.find("transpose_b")->second;
      def.attrs["alpha"] = static_cast<double>(op == "Div" ? 1 / *c : *c);
      replaced_.erase(*product);
      Replace(std::move(def), {*product, scaled}, tail);
      stats->scaled_matmuls++;
      return true;
    }
    return false;
  }

  bool IsPerm(int id, std::initializer_list<int64_t> want) const {
    return N(id).op() == "Transpose" &&
           std::get<std::vector<int64_t>>(*N(id).FindAttr("perm")) == std::vector<int64_t>(want);
  }
  bool Flag(int id, const char* name) const { return std::get<bool>(*N(id).FindAttr(name)); }

  // Where a head's rows come from: `x` [B, S, heads, dim] itself (column 0), or, when x is
  // Reshape(To)(Slice(p)) of a [B, S, W] p along its last axis (a Split of a projection that
  // computes queries, keys and values at once) placed as the attention's `tail`, p from the
  // slice's first column.
  struct HeadSource {
    Endpoint tensor;
    int64_t col = 0;
    std::vector<int> inner;  // the Reshape and Slice that go
  };
  HeadSource SourceOf(const Endpoint& x, int tail) const {
    HeadSource plain{x, 0, {}};
    const Node& r = N(x.node);
    if ((r.op() != "Reshape" && r.op() != "ReshapeTo") || x.index != 0 || !Inner(x.node)) {
      return plain;
    }
    const int slice = r.inputs()[0].node;
    if (N(slice).op() != "Slice" || r.inputs()[0].index != 0 || !Inner(slice) ||
        !SamePlace({slice, x.node, tail})) {
      return plain;
    }
    const Shape& y = ShapeOf(x);
    const Endpoint p = N(slice).inputs()[0];
    const Shape& ps = ShapeOf(p);
    const auto begin = std::get<std::vector<int64_t>>(*N(slice).FindAttr("begin"));
    const auto size = std::get<std::vector<int64_t>>(*N(slice).FindAttr("size"));
    if (!ps.fully_defined() || ps.rank() != 3 || y[0] != ps[0] || y[1] != ps[1] || begin[0] != 0 ||
        begin[1] != 0 || (size[0] != -1 && size[0] != ps[0]) ||
        (size[1] != -1 && size[1] != ps[1]) || size[2] != y[2] * y[3] ||
        N(p.node).output_dtype(p.index) != DType::kF32) {
      return plain;
    }
    return {p, begin[2], {slice, x.node}};
  }

  // tail = Transpose(BatchMatMul(Softmax(_ScaledBatchMatMul(Transpose(q), Transpose(k), m)),
  // Transpose(v)), [0, 2, 1, 3]) with q, k, v [B, S, heads, dim], every Transpose [0, 2, 1, 3]
  // and the keys' read transposed (as the first pass leaves an attention PyTorch exported):
  // _Attention(q, k, v, m), reading each from the projection it was sliced from where it was.
  bool MatchAttention(int tail, SubgraphStats* stats) {
    if (!HasKernel("_Attention") || !IsPerm(tail, {0, 2, 1, 3}) ||
        N(tail).output_dtype(0) != DType::kF32) {
      return false;
    }
    auto pv = Input(tail, 0, "BatchMatMul");
    if (!pv || !Inner(*pv) || Flag(*pv, "transpose_a") || Flag(*pv, "transpose_b")) return false;
    auto sm = Input(*pv, 0, "Softmax");
    if (!sm || !Inner(*sm)) return false;
    auto sc = Input(*sm, 0, "_ScaledBatchMatMul");
    if (!sc || !Inner(*sc) || Flag(*sc, "transpose_a") || !Flag(*sc, "transpose_b")) return false;
    auto tq = Input(*sc, 0, "Transpose");
    auto tk = Input(*sc, 1, "Transpose");
    auto tv = Input(*pv, 1, "Transpose");
    if (!tq || !tk || !tv) return false;
    for (int t : {*tq, *tk, *tv}) {
      if (!Inner(t) || !IsPerm(t, {0, 2, 1, 3})) return false;
    }
    const Endpoint xq = N(*tq).inputs()[0], xk = N(*tk).inputs()[0], xv = N(*tv).inputs()[0];
    const Shape &q = ShapeOf(xq), &k = ShapeOf(xk), &v = ShapeOf(xv);
    // The heads and their widths known; the batch and the sequences may be unknown (the kernel
    // checks that they agree, as the products would).
    for (const Shape* s : {&q, &k, &v}) {
      if (s->unknown_rank() || s->rank() != 4 || (*s)[2] < 0 || (*s)[3] < 0) return false;
    }
    if (k[2] != q[2] || v[2] != q[2] || k[3] != q[3]) return false;
    std::vector<int> inner = {*tq, *tk, *tv, *sc, *sm, *pv};
    if (!SamePlace({*tq, *tk, *tv, *sc, *sm, *pv, tail})) return false;
    NodeDef def;
    def.op = "_Attention";
    def.attrs["T"] = DType::kF32;
    def.attrs["heads"] = q[2];
    def.attrs["head_dim"] = q[3];
    def.attrs["value_dim"] = v[3];
    def.attrs["alpha"] = std::get<double>(*N(*sc).FindAttr("alpha"));
    const std::pair<Endpoint, const char*> sources[] = {
        {xq, "q_col"}, {xk, "k_col"}, {xv, "v_col"}};
    for (const auto& [x, col] : sources) {
      HeadSource src = SourceOf(x, tail);
      // The same Slice read for two of q, k and v is read twice: Inner rules that out.
      def.inputs.push_back({N(src.tensor.node).name(), src.tensor.index});
      def.attrs[col] = src.col;
      inner.insert(inner.end(), src.inner.begin(), src.inner.end());
    }
    const Endpoint mask = N(*sc).inputs()[2];
    def.inputs.push_back({N(mask.node).name(), mask.index});
    Replace(std::move(def), inner, tail);
    stats->attention++;
    return true;
  }

  const Graph& g_;
  std::vector<std::vector<std::pair<int, int>>> consumers_;
  std::vector<bool> pinned_;
  std::function<bool(const char*)> has_;
  std::vector<bool> removed_;
  std::unordered_map<int, NodeDef> replaced_;  // node id -> what is emitted in its place
  // A bias Add that became a Reshape of a _FusedMatMul -> that MatMul's id.
  std::unordered_map<int, int> matmul_behind_;
};

}  // namespace

Result<SubgraphFused> FuseSubgraphs(const Graph& graph, const std::vector<int>& keep,
                                    const std::function<bool(const char* op)>& has_kernel) {
  if (!graph.validated()) return FailedPrecondition("FuseSubgraphs needs a validated graph");
  ASSIGN_OR_RETURN(SubgraphFused ops, SubgraphFuser(graph, keep, has_kernel).Run(false));
  // The kept nodes by name: each fused node is named as the last node it replaces.
  std::vector<int> kept;
  for (int k : keep) {
    if (auto id = ops.graph.FindNode(graph.node(k).name())) kept.push_back(*id);
  }
  return SubgraphFuser(ops.graph, kept, has_kernel).Run(true, ops.stats);
}

}  // namespace dflow::ops
