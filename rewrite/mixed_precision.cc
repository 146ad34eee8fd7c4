#include "rewrite/mixed_precision.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "graph/scope.h"
#include "ops/array_ops.h"
#include "ops/grad_ops.h"
#include "ops/logic_ops.h"
#include "ops/math_ops.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"

namespace dflow::ops {
namespace {

constexpr char kScope[] = "mixed_precision";

std::string Ref(const std::string& node, int index) {
  return index == 0 ? node : fmt::format("{}:{}", node, index);
}

Status CheckOptions(const MixedPrecisionOptions& o) {
  if (o.compute != DType::kBF16 && o.compute != DType::kF16) {
    return InvalidArgument("MixedPrecision: compute dtype must be bf16 or f16, got {}", o.compute);
  }
  if (o.loss_scaling == MixedPrecisionOptions::LossScaling::kNone) return Status::OK();
  if (o.loss.empty()) return InvalidArgument("MixedPrecision: loss scaling needs the loss node");
  const auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(o.initial_scale)) {
    return InvalidArgument("MixedPrecision: initial_scale must be positive and finite, got {}",
                           o.initial_scale);
  }
  if (o.loss_scaling == MixedPrecisionOptions::LossScaling::kDynamic) {
    if (!positive(o.growth_factor) || o.growth_factor < 1) {
      return InvalidArgument("MixedPrecision: growth_factor must be finite and >= 1, got {}",
                             o.growth_factor);
    }
    if (!positive(o.backoff_factor) || o.backoff_factor > 1) {
      return InvalidArgument("MixedPrecision: backoff_factor must be in (0, 1], got {}",
                             o.backoff_factor);
    }
    if (o.growth_interval < 1) {
      return InvalidArgument("MixedPrecision: growth_interval must be >= 1, got {}",
                             o.growth_interval);
    }
  }
  return Status::OK();
}

// The type attribute shared by a node's first output and the inputs it converts: "T" for the
// products. Empty when the op's output has no type attribute.
std::string TypeAttr(const Node& node) {
  const OpDef* def = node.op_def();
  if (def == nullptr || def->outputs.empty()) return "";
  return def->outputs[0].type_attr;
}

// Whether input i of `node` takes the converted type attribute.
bool Converts(const Node& node, int i, const std::string& attr) {
  const std::vector<ArgDef>& in = node.op_def()->inputs;
  const ArgDef& arg = in[std::min<size_t>(i, in.size() - 1)];  // a variadic last one repeats
  return arg.type_attr == attr;
}

// An update: a stateful node with an input named "grad" (the optimizers' Apply ops); its index.
int GradInput(const Node& node) {
  const OpDef* def = node.op_def();
  if (def == nullptr || !def->stateful) return -1;
  for (size_t i = 0; i < def->inputs.size(); ++i) {
    if (def->inputs[i].name == "grad") return static_cast<int>(i);
  }
  return -1;
}

// What loss scaling adds, built with the ops' own builders in a graph of its own, then spliced
// into the rewritten graph: the placeholders there stand for the seed and the gradients.
struct Scaling {
  Graph graph;
  std::map<std::string, std::string> placeholders;  // its placeholder -> the tensor it stands for
  std::vector<std::string> scaled_seeds;            // per seed
  std::vector<std::string> unscaled;                // per update, its gradient divided by the scale
  std::string finite;                               // kDynamic
  std::vector<std::string> scale_updates, init_targets, reads_of_scale;
  std::string scale;
};

// `checked[i]`: whether gradient i is among those AllFinite reads (a mirrored variable's
// gradient, a replica's copy of replica 0's, is not read again).
Result<Scaling> BuildScaling(const Graph& g, const MixedPrecisionOptions& o,
                             const std::vector<int>& seeds, const std::vector<Endpoint>& grads,
                             const std::vector<bool>& checked) {
  const bool dynamic = o.loss_scaling == MixedPrecisionOptions::LossScaling::kDynamic;
  Scope root = Scope::NewRootScope();
  Scope s = root.WithNameScope(kScope);
  Scaling r;
  const DType seed_type = g.node(seeds[0]).output_dtype(0);
  Output scale;
  if (dynamic) {
    scale = Variable(s.WithOpName("loss_scale"), Shape{}, seed_type);
    Output init =
        Assign(s.WithOpName("loss_scale_init"), scale, ScalarConst(s, seed_type, o.initial_scale));
    r.init_targets.push_back(init.node_name());
  } else {
    scale = ScalarConst(s.WithOpName("loss_scale"), seed_type, o.initial_scale);
  }
  r.scale = scale.node_name();
  for (size_t i = 0; i < seeds.size(); ++i) {
    const Node& seed = g.node(seeds[i]);
    const std::string suffix = i == 0 ? "" : fmt::format("_{}", i);
    const DType t = seed.output_dtype(0);
    Output seed_in = Placeholder(s.WithOpName("in/seed" + suffix), t, seed.output_shape(0));
    r.placeholders[seed_in.node_name()] = seed.name();
    Output scale_t = t == seed_type ? scale : Cast(s, scale, t);
    Output scaled = Mul(s.WithOpName("scaled_seed" + suffix), seed_in, scale_t);
    r.scaled_seeds.push_back(scaled.node_name());
    r.reads_of_scale.push_back(scaled.node_name());
    r.reads_of_scale.push_back(scale_t.node_name());
  }
  std::vector<Output> unscaled, to_check;
  std::map<DType, Output> inverse;  // 1 / scale in each gradient's dtype
  for (size_t i = 0; i < grads.size(); ++i) {
    const Node& producer = g.node(grads[i].node);
    const DType t = producer.output_dtype(grads[i].index);
    Output in = Placeholder(s.WithOpName(fmt::format("in/grad{}", i)), t,
                            producer.output_shape(grads[i].index));
    r.placeholders[in.node_name()] = Ref(producer.name(), grads[i].index);
    auto it = inverse.find(t);
    if (it == inverse.end()) {
      Output scale_t = t == seed_type ? scale : Cast(s, scale, t);
      Output inv = Div(s.WithOpName(fmt::format("inverse_scale_{}", DTypeName(t))),
                       ScalarConst(s, t, 1.0), scale_t);
      r.reads_of_scale.push_back(scale_t.node_name());
      r.reads_of_scale.push_back(inv.node_name());
      it = inverse.emplace(t, inv).first;
    }
    Output u = Mul(s.WithOpName(fmt::format("unscaled_grad{}", i)), in, it->second);
    unscaled.push_back(u);
    if (checked[i]) to_check.push_back(u);
    r.unscaled.push_back(u.node_name());
  }
  if (dynamic) {
    if (to_check.empty()) to_check = unscaled;
    Output finite = s.OutputOf(s.WithOpName("grads_finite").AddNode("AllFinite", to_check, {}));
    r.finite = finite.node_name();
    const DType t = seed_type;
    Output good = Variable(s.WithOpName("good_steps"), Shape{}, t);
    Output good_init = Assign(s.WithOpName("good_steps_init"), good, ScalarConst(s, t, 0.0));
    r.init_targets.push_back(good_init.node_name());
    Output zero = ScalarConst(s, t, 0.0);
    Output next_good =
        Select(s.WithOpName("next_good_steps"), finite, Add(s, good, ScalarConst(s, t, 1.0)), zero);
    Output grow = GreaterEqual(s.WithOpName("grow"), next_good,
                               ScalarConst(s, t, static_cast<double>(o.growth_interval)));
    // Grown only to a finite scale (an infinite one would skip every step from then on).
    Output bigger = Mul(s, scale, ScalarConst(s, t, o.growth_factor));
    Output bigger_finite = s.OutputOf(s.AddNode("AllFinite", {bigger}, {}));
    Output grown = Select(s, grow, Select(s, bigger_finite, bigger, scale), scale);
    Output next_scale = Select(s.WithOpName("next_loss_scale"), finite, grown,
                               Mul(s, scale, ScalarConst(s, t, o.backoff_factor)));
    Output set_scale = Assign(s.WithOpName("update_loss_scale"), scale, next_scale);
    Output set_good =
        Assign(s.WithOpName("update_good_steps"), good, Select(s, grow, zero, next_good));
    r.scale_updates = {set_scale.node_name(), set_good.node_name()};
  }
  RETURN_IF_ERROR(root.status().WithPrefix("MixedPrecision: building the loss scaling: "));
  r.graph = root.graph();
  return r;
}

}  // namespace

Result<MixedPrecisionGraph> MixedPrecision(const Graph& training, const MixedPrecisionOptions& o) {
  RETURN_IF_ERROR(CheckOptions(o));
  Graph validated_copy;
  const Graph* gp = &training;
  if (!training.validated()) {
    validated_copy = training;
    RETURN_IF_ERROR(validated_copy.Validate().WithPrefix("MixedPrecision: "));
    gp = &validated_copy;
  }
  const Graph& g = *gp;
  const std::string dt(DTypeName(o.compute));
  const std::set<std::string> ops(o.ops.begin(), o.ops.end());
  const bool scaling = o.loss_scaling != MixedPrecisionOptions::LossScaling::kNone;
  const bool dynamic = o.loss_scaling == MixedPrecisionOptions::LossScaling::kDynamic;

  std::set<std::string> taken;
  for (int id = 0; id < g.num_nodes(); ++id) taken.insert(g.node(id).name());
  auto unique = [&](std::string base) {
    std::string name = base;
    for (int i = 1; taken.count(name) != 0; ++i) name = fmt::format("{}_{}", base, i);
    taken.insert(name);
    return name;
  };

  // The nodes that run in `compute`.
  std::vector<bool> convert(g.num_nodes(), false);
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (ops.count(n.op()) == 0 || n.num_outputs() == 0) continue;
    const std::string attr = TypeAttr(n);
    const AttrValue* t = attr.empty() ? nullptr : n.FindAttr(attr);
    convert[id] =
        n.output_dtype(0) == DType::kF32 && (t == nullptr || std::get<DType>(*t) == DType::kF32);
  }

  // Loss scaling: the seed, the updates and their gradients.
  std::vector<int> updates;
  std::vector<Endpoint> grads;
  std::vector<bool> checked;
  std::optional<Scaling> scaling_graph;
  std::vector<int> seeds;
  std::map<std::string, int> seed_index;  // seed name -> its index in `seeds`
  if (scaling) {
    // The node, also when named as its output ("loss:0").
    ASSIGN_OR_RETURN(InputRef loss_ref, ParseInputRef(o.loss));
    std::optional<int> loss = g.FindNode(loss_ref.node);
    if (!loss) return NotFound("MixedPrecision: no loss node '{}'", o.loss);
    for (const char* name : {"loss_scale", "scaled_seed"}) {
      if (taken.count(fmt::format("{}/{}", kScope, name)) != 0) {
        return InvalidArgument(
            "MixedPrecision: the graph has a node '{}/{}' already (loss scaling applied twice?)",
            kScope, name);
      }
    }
    // The loss and what it is computed from: after Replicate the loss is the mean of the
    // replicas' losses, each with its own seed.
    std::vector<bool> feeds_loss(g.num_nodes(), false);
    std::vector<int> stack = {*loss};
    while (!stack.empty()) {
      const int id = stack.back();
      stack.pop_back();
      if (feeds_loss[id]) continue;
      feeds_loss[id] = true;
      for (const Endpoint& e : g.node(id).inputs()) stack.push_back(e.node);
    }
    for (int id = 0; id < g.num_nodes(); ++id) {
      const Node& n = g.node(id);
      if (n.op() == "OnesLike" && n.num_inputs() == 1 && feeds_loss[n.inputs()[0].node] &&
          n.name().ends_with("_seed") && IsFloatingPoint(n.output_dtype(0))) {
        seed_index[n.name()] = static_cast<int>(seeds.size());
        seeds.push_back(id);
      }
      const int gi = GradInput(n);
      if (gi < 0) continue;
      if (dynamic && g.registry().Find(n.op() + "If") == nullptr) {
        return Unimplemented(
            "MixedPrecision: update '{}' ({}) has no gated twin to skip a step with non-finite "
            "gradients",
            n.name(), n.op());
      }
      updates.push_back(id);
      grads.push_back(n.inputs()[gi]);
      const AttrValue* mirror = g.node(n.inputs()[0].node).FindAttr("mirror_of");
      checked.push_back(mirror == nullptr || std::get<std::string>(*mirror).empty());
    }
    if (seeds.empty()) {
      return InvalidArgument(
          "MixedPrecision: loss '{}' has no gradient seed (build the training graph with "
          "Optimizer::Minimize or Gradients)",
          o.loss);
    }
    if (updates.empty()) {
      return InvalidArgument("MixedPrecision: no update reads a gradient of loss '{}'", o.loss);
    }
    ASSIGN_OR_RETURN(Scaling sc, BuildScaling(g, o, seeds, grads, checked));
    scaling_graph = std::move(sc);
  }

  MixedPrecisionGraph result;
  result.graph = std::make_shared<Graph>(&g.registry());
  Graph& out = *result.graph;
  out.Reserve(g.num_nodes() * 2);
  Status status;
  auto add = [&](NodeDef def) {
    if (!status.ok()) return;
    auto added = out.AddNode(std::move(def));
    if (!added.ok()) status = added.status();
  };

  // One cast per (tensor, dtype).
  std::map<std::pair<std::string, int>, std::string> half_of;
  auto half_input = [&](const Endpoint& e, const Node& reader) -> std::string {
    const Node& p = g.node(e.node);
    if (convert[e.node] && e.index == 0) return p.name() + "/" + dt;  // its own half value
    auto key = std::make_pair(p.name(), e.index);
    auto it = half_of.find(key);
    if (it != half_of.end()) return it->second;
    std::string name = unique(e.index == 0 ? fmt::format("{}/to_{}", p.name(), dt)
                                           : fmt::format("{}/{}/to_{}", p.name(), e.index, dt));
    add({.name = name,
         .op = "Cast",
         .inputs = {{p.name(), e.index}},
         .attrs = {{"SrcT", DType::kF32}, {"DstT", o.compute}},
         .device = reader.requested_device()});
    ++result.casts;
    half_of.emplace(key, name);
    return name;
  };

  std::map<int, int> update_index;
  for (size_t i = 0; i < updates.size(); ++i) update_index[updates[i]] = static_cast<int>(i);
  std::set<std::string> update_names;
  for (int id : updates) update_names.insert(g.node(id).name());

  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    NodeDef def = n.def();
    // Inputs resolved to the producers' names (a def may spell them "x:0").
    for (int i = 0; i < n.num_inputs(); ++i) {
      def.inputs[i] = {g.node(n.inputs()[i].node).name(), n.inputs()[i].index};
    }
    if (scaling) {
      for (auto& in : def.inputs) {
        auto it = seed_index.find(in.node);
        if (it != seed_index.end() && in.index == 0) {
          in = {scaling_graph->scaled_seeds[it->second], 0};
        }
      }
    }
    if (auto u = update_index.find(id); u != update_index.end()) {
      def.inputs[GradInput(n)] = {scaling_graph->unscaled[u->second], 0};
      if (dynamic) {
        def.op += "If";
        def.inputs.push_back({scaling_graph->finite, 0});
      }
    }
    // The step's target (a NoOp over the updates) runs the scale's updates too.
    if (dynamic && n.op() == "NoOp") {
      bool over_updates = false;
      for (const auto& c : def.control_inputs) over_updates |= update_names.count(c) != 0;
      if (over_updates) {
        for (const auto& u : scaling_graph->scale_updates) def.control_inputs.push_back(u);
      }
    }
    if (!convert[id]) {
      add(std::move(def));
      continue;
    }
    const std::string attr = TypeAttr(n);
    NodeDef half = def;
    half.name = n.name() + "/" + dt;
    if (taken.count(half.name) != 0) {
      return InvalidArgument("MixedPrecision: node '{}' exists already (rewritten twice?)",
                             half.name);
    }
    taken.insert(half.name);
    half.attrs[attr] = o.compute;
    for (int i = 0; i < n.num_inputs(); ++i) {
      if (Converts(n, i, attr)) {
        half.inputs[i] = {half_input(n.inputs()[i], n), 0};
      }
    }
    add(std::move(half));
    ++result.converted;
    // The node's own name gives its value in f32, for every reader, fetch and control input.
    add({.name = n.name(),
         .op = "Cast",
         .inputs = {{n.name() + "/" + dt, 0}},
         .attrs = {{"SrcT", o.compute}, {"DstT", DType::kF32}},
         .device = n.requested_device(),
         .colocation_group = n.colocation_group()});
    ++result.casts;
  }

  if (scaling) {
    Scaling& sc = *scaling_graph;
    const Graph& sg = sc.graph;
    for (int id = 0; id < sg.num_nodes(); ++id) {
      const Node& n = sg.node(id);
      if (sc.placeholders.count(n.name()) != 0) continue;
      NodeDef def = n.def();
      for (int i = 0; i < n.num_inputs(); ++i) {
        const std::string& from = sg.node(n.inputs()[i].node).name();
        auto p = sc.placeholders.find(from);
        if (p == sc.placeholders.end()) {
          def.inputs[i] = {from, n.inputs()[i].index};
        } else {
          ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(p->second));
          def.inputs[i] = ref;
        }
      }
      if (dynamic &&
          (n.name() == sc.scale_updates.front() || n.name() == sc.scale_updates.back())) {
        // The new scale is written after this step's every read of the old one.
        for (const auto& r : sc.reads_of_scale) def.control_inputs.push_back(r);
        for (int u : updates) def.control_inputs.push_back(g.node(u).name());
      }
      if (taken.count(def.name) != 0 && sc.placeholders.count(def.name) == 0) {
        return InvalidArgument("MixedPrecision: the graph has a node '{}' already", def.name);
      }
      taken.insert(def.name);
      add(std::move(def));
    }
    result.loss_scale = sc.scale;
    result.grads_finite = sc.finite;
    result.init_targets = sc.init_targets;
  }
  RETURN_IF_ERROR(status.WithPrefix("MixedPrecision: "));
  RETURN_IF_ERROR(out.Validate().WithPrefix("MixedPrecision: the rewritten graph: "));
  return result;
}

}  // namespace dflow::ops
