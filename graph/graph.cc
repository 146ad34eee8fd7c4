#include "graph/graph.h"

#include <algorithm>
#include <charconv>

namespace dflow {

Result<InputRef> ParseInputRef(std::string_view ref) {
  size_t colon = ref.rfind(':');
  InputRef out;
  if (colon == std::string_view::npos) {
    out.node = std::string(ref);
  } else {
    out.node = std::string(ref.substr(0, colon));
    auto digits = ref.substr(colon + 1);
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out.index);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() ||
        out.index < 0) {
      return InvalidArgument("malformed tensor reference '{}': expected NODE or NODE:INDEX", ref);
    }
  }
  if (out.node.empty()) return InvalidArgument("malformed tensor reference '{}': no node", ref);
  return out;
}

const AttrValue* Node::FindAttr(std::string_view attr) const {
  auto it = def_.attrs.find(attr);
  return it == def_.attrs.end() ? nullptr : &it->second;
}

template <typename T>
Result<T> Node::GetAttr(std::string_view attr) const {
  const AttrValue* v = FindAttr(attr);
  if (v == nullptr) {
    return InvalidArgument("node '{}' ({}): missing attribute '{}'", name(), op(), attr);
  }
  if (!std::holds_alternative<T>(*v)) {
    return InvalidArgument("node '{}' ({}): attribute '{}' is {}, expected {}", name(), op(), attr,
                           AttrTypeName(TypeOf(*v)), AttrTypeName(AttrTypeOf<T>()));
  }
  return std::get<T>(*v);
}
template Result<int64_t> Node::GetAttr(std::string_view) const;
template Result<double> Node::GetAttr(std::string_view) const;
template Result<bool> Node::GetAttr(std::string_view) const;
template Result<std::string> Node::GetAttr(std::string_view) const;
template Result<DType> Node::GetAttr(std::string_view) const;
template Result<Shape> Node::GetAttr(std::string_view) const;
template Result<Tensor> Node::GetAttr(std::string_view) const;
template Result<std::vector<int64_t>> Node::GetAttr(std::string_view) const;
template Result<std::vector<double>> Node::GetAttr(std::string_view) const;
template Result<std::vector<std::string>> Node::GetAttr(std::string_view) const;
template Result<std::vector<DType>> Node::GetAttr(std::string_view) const;
template Result<std::vector<Shape>> Node::GetAttr(std::string_view) const;

Result<int> Graph::AddNode(NodeDef def) {
  if (def.name.empty()) return InvalidArgument("a node of op '{}' has an empty name", def.op);
  const int id = num_nodes();
  auto name_of = [this](int i) { return NameOf(i); };
  if (by_name_.Insert(def.name, id, name_of) >= 0) {
    return InvalidArgument("duplicate node name '{}' (op {}): names must be unique", def.name,
                           def.op);
  }
  Node& n = nodes_.emplace_back();
  n.id_ = id;
  n.def_ = std::move(def);
  validated_ = false;
  return id;
}

Result<int> Graph::AddValidatedCopy(const Node& node, NodeDef def) {
  DFLOW_CHECK(node.op_def() != nullptr && def.op == node.op());
  ASSIGN_OR_RETURN(int id, AddNode(std::move(def)));
  Node& n = nodes_[id];
  n.inferred_ = true;
  n.op_def_ = node.op_def_;
  n.output_dtypes_ = node.output_dtypes_;
  n.output_shapes_ = node.output_shapes_;
  return id;
}

Result<int> Graph::AddNodeChecked(NodeDef def) {
  ASSIGN_OR_RETURN(int id, AddNode(std::move(def)));
  Status s = CheckNode(nodes_[id]);
  if (!s.ok()) {
    by_name_.Erase(nodes_[id].name(), [this](int i) { return NameOf(i); });
    nodes_.pop_back();
    return s;
  }
  return id;
}

Status Graph::AddControlInput(int to, std::string_view from) {
  auto f = FindNode(from);
  if (!f)
    return InvalidArgument("node '{}': control input '{}' does not exist", node(to).name(), from);
  nodes_[to].def_.control_inputs.emplace_back(from);
  nodes_[to].control_inputs_.push_back(*f);
  validated_ = false;
  return Status::OK();
}

void Graph::SetColocationGroup(int node, std::string group) {
  nodes_[node].def_.colocation_group = std::move(group);
}

std::optional<int> Graph::FindNode(std::string_view name) const {
  int id = by_name_.Find(name, [this](int i) { return NameOf(i); });
  if (id < 0) return std::nullopt;
  return id;
}

Status Graph::ResolveInputs(Node& n) {
  n.inputs_.clear();
  n.control_inputs_.clear();
  n.inputs_.reserve(n.def_.inputs.size());
  for (size_t i = 0; i < n.def_.inputs.size(); ++i) {
    const InputRef& ref = n.def_.inputs[i];
    auto src = FindNode(ref.node);
    if (!src) {
      return InvalidArgument("node '{}' ({}): input {} refers to '{}:{}', but no node '{}' exists",
                             n.name(), n.op(), i, ref.node, ref.index, ref.node);
    }
    n.inputs_.push_back({*src, ref.index});
  }
  for (const auto& name : n.def_.control_inputs) {
    auto src = FindNode(name);
    if (!src) {
      return InvalidArgument("node '{}' ({}): control input '{}' does not exist", n.name(), n.op(),
                             name);
    }
    n.control_inputs_.push_back(*src);
  }
  return Status::OK();
}

namespace {
bool Allowed(const ArgDef& arg, DType d) {
  return arg.allowed.empty() ||
         std::find(arg.allowed.begin(), arg.allowed.end(), d) != arg.allowed.end();
}
// Bounds an attribute-counted output list, so a hostile graph cannot ask for billions of outputs.
constexpr int64_t kMaxRepeatedOutputs = 1 << 16;
constexpr int64_t kMaxElements = int64_t{1} << 48;  // per tensor

std::string AllowedList(const ArgDef& arg) {
  std::string s;
  for (DType d : arg.allowed) s += (s.empty() ? "" : ", ") + std::string(DTypeName(d));
  return s;
}
}  // namespace

Status Graph::CheckNode(Node& n, bool resolved) {
  const OpDef* def = registry_->Find(n.op());
  if (def == nullptr) return InvalidArgument("node '{}': unknown op '{}'", n.name(), n.op());
  n.op_def_ = def;
  if (!resolved) RETURN_IF_ERROR(ResolveInputs(n));
  // The start of every message, formatted only on an error path.
  auto prefix = [&n] { return fmt::format("node '{}' ({}): ", n.name(), n.op()); };

  // Arity.
  int fixed = static_cast<int>(def->inputs.size());
  bool variadic = !def->inputs.empty() && def->inputs.back().variadic;
  if (variadic ? n.num_inputs() < fixed : n.num_inputs() != fixed) {
    return InvalidArgument("{}takes {}{} input{}, got {}", prefix(), variadic ? "at least " : "",
                           fixed, fixed == 1 ? "" : "s", n.num_inputs());
  }

  // Attributes: known names, right types, defaults filled in.
  for (const auto& [name, value] : n.def_.attrs) {
    const AttrDef* a = def->FindAttr(name);
    if (a == nullptr) return InvalidArgument("{}unknown attribute '{}'", prefix(), name);
    if (TypeOf(value) != a->type) {
      return InvalidArgument("{}attribute '{}' is {}, expected {}", prefix(), name,
                             AttrTypeName(TypeOf(value)), AttrTypeName(a->type));
    }
  }

  // Every attribute is the op's (checked above): room for the ones still to come, allocated once.
  n.def_.attrs.reserve(def->attrs.size());

  // Input dtypes: fixed ones checked, type attributes bound from the first input using them.
  std::vector<DType> in_dtypes(n.num_inputs());
  std::vector<Shape> in_shapes(n.num_inputs());
  for (int i = 0; i < n.num_inputs(); ++i) {
    const Endpoint& e = n.inputs_[i];
    const Node& src = nodes_[e.node];
    if (src.op_def_ == nullptr) {
      return FailedPrecondition("{}input {} '{}' has not been checked yet; call Validate()",
                                prefix(), i, src.name());
    }
    if (e.index >= src.num_outputs()) {
      return InvalidArgument("{}input {} refers to '{}:{}', but '{}' ({}) has {} output{}",
                             prefix(), i, src.name(), e.index, src.name(), src.op(),
                             src.num_outputs(), src.num_outputs() == 1 ? "" : "s");
    }
    in_dtypes[i] = src.output_dtypes_[e.index];
    in_shapes[i] = src.output_shapes_[e.index];
    const ArgDef& arg = def->inputs[std::min(i, fixed - 1)];
    if (arg.fixed != DType::kInvalid && in_dtypes[i] != arg.fixed) {
      return InvalidArgument("{}input {} ('{}', from '{}:{}') must be {}, got {}", prefix(), i,
                             arg.name, src.name(), e.index, arg.fixed, in_dtypes[i]);
    }
    if (!Allowed(arg, in_dtypes[i])) {
      return InvalidArgument("{}input {} ('{}', from '{}:{}') is {}; {} accepts {}", prefix(), i,
                             arg.name, src.name(), e.index, in_dtypes[i], n.op(), AllowedList(arg));
    }
    if (arg.type_attr.empty()) continue;
    auto it = n.def_.attrs.find(arg.type_attr);
    if (it == n.def_.attrs.end()) {
      n.def_.attrs.emplace(arg.type_attr, in_dtypes[i]);
      continue;
    }
    DType bound = std::get<DType>(it->second);
    if (bound != in_dtypes[i]) {
      int first = -1;
      for (int j = 0; j < i; ++j) {
        if (def->inputs[std::min(j, fixed - 1)].type_attr == arg.type_attr) {
          first = j;
          break;
        }
      }
      if (first >= 0) {
        const Node& other = nodes_[n.inputs_[first].node];
        return InvalidArgument(
            "{}dtype mismatch: input {} ('{}:{}') is {} but input {} ('{}:{}') is {}", prefix(), i,
            src.name(), e.index, in_dtypes[i], first, other.name(), n.inputs_[first].index,
            in_dtypes[first]);
      }
      return InvalidArgument("{}dtype mismatch: input {} ('{}:{}') is {} but attribute {} is {}",
                             prefix(), i, src.name(), e.index, in_dtypes[i], arg.type_attr, bound);
    }
  }
  for (const auto& a : def->attrs) {
    if (n.def_.attrs.count(a.name)) continue;
    if (!a.default_value)
      return InvalidArgument("{}missing required attribute '{}'", prefix(), a.name);
    n.def_.attrs.emplace(a.name, *a.default_value);
  }

  // Output dtypes.
  n.output_dtypes_.clear();
  for (const auto& out : def->outputs) {
    DType d = out.fixed;
    if (!out.type_attr.empty()) {
      auto it = n.def_.attrs.find(out.type_attr);
      if (it == n.def_.attrs.end()) {
        return InvalidArgument("{}cannot tell the dtype of output '{}': attribute '{}' is unset",
                               prefix(), out.name, out.type_attr);
      }
      d = std::get<DType>(it->second);
      if (!Allowed(out, d)) {
        return InvalidArgument("{}output '{}' cannot be {}; {} accepts {}", prefix(), out.name, d,
                               n.op(), AllowedList(out));
      }
    }
    int64_t repeat = 1;
    if (!out.number_attr.empty()) {
      auto it = n.def_.attrs.find(out.number_attr);
      if (it == n.def_.attrs.end()) {
        return InvalidArgument("{}missing attribute '{}' (the number of outputs '{}')", prefix(),
                               out.number_attr, out.name);
      }
      repeat = std::get<int64_t>(it->second);
      if (repeat < 1 || repeat > kMaxRepeatedOutputs) {
        return InvalidArgument("{}attribute '{}' is {}: the number of outputs must be 1 to {}",
                               prefix(), out.number_attr, repeat, kMaxRepeatedOutputs);
      }
    }
    n.output_dtypes_.insert(n.output_dtypes_.end(), repeat, d);
  }

  InferenceContext ctx(*this, n, in_dtypes, in_shapes, n.output_dtypes_);
  RETURN_IF_ERROR(def->shape_fn(ctx));
  // Sizes stay far from int64 overflow, whatever a file declares: later products (elements,
  // bytes, a batch times the rest) are then safe.
  for (size_t i = 0; i < ctx.output_shapes.size(); ++i) {
    int64_t known = 1;
    for (int64_t d : ctx.output_shapes[i].dims()) {
      if (d >= 0 && (__builtin_mul_overflow(known, d, &known) || known > kMaxElements)) {
        return InvalidArgument("{}output {} would have shape {}: more than 2^48 elements", prefix(),
                               i, ctx.output_shapes[i]);
      }
    }
  }
  n.output_shapes_ = std::move(ctx.output_shapes);
  return Status::OK();
}

Status Graph::FindCycle() const {
  // Iterative DFS with colours; reports the first cycle found as a path of names.
  std::vector<uint8_t> colour(nodes_.size(), 0);  // 0 new, 1 on stack, 2 done
  std::vector<int> parent(nodes_.size(), -1);
  for (size_t root = 0; root < nodes_.size(); ++root) {
    if (colour[root]) continue;
    std::vector<std::pair<int, size_t>> stack = {{static_cast<int>(root), 0}};
    colour[root] = 1;
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      const Node& n = nodes_[v];
      size_t total = n.inputs_.size() + n.control_inputs_.size();
      if (next == total) {
        colour[v] = 2;
        stack.pop_back();
        continue;
      }
      int u = next < n.inputs_.size() ? n.inputs_[next].node
                                      : n.control_inputs_[next - n.inputs_.size()];
      ++next;
      if (colour[u] == 0) {
        colour[u] = 1;
        parent[u] = v;
        stack.push_back({u, 0});
      } else if (colour[u] == 1) {
        // u feeds v (and so on up to u): list producers before consumers.
        std::vector<std::string> names;
        for (int w = v; w != u; w = parent[w]) names.push_back(nodes_[w].name());
        names.push_back(nodes_[u].name());
        std::string path = "'" + nodes_[u].name() + "'";
        for (auto it = names.begin(); it != names.end(); ++it) path += " -> '" + *it + "'";
        return InvalidArgument("cycle in the graph: {}", path);
      }
    }
  }
  return Internal("a cycle was detected but not found");
}

Status Graph::Validate() {
  if (validated_) return Status::OK();
  for (auto& n : nodes_) {
    if (registry_->Find(n.op()) == nullptr) {
      return InvalidArgument("node '{}': unknown op '{}'", n.name(), n.op());
    }
    RETURN_IF_ERROR(ResolveInputs(n));
  }
  // Kahn's algorithm over data and control edges; successors in one array (CSR).
  const size_t n = nodes_.size();
  std::vector<int> pending(n, 0), first(n + 1, 0);
  for (const auto& node : nodes_) {
    for (const auto& e : node.inputs_) first[e.node + 1]++;
    for (int c : node.control_inputs_) first[c + 1]++;
    pending[node.id_] = static_cast<int>(node.inputs_.size() + node.control_inputs_.size());
  }
  for (size_t i = 0; i < n; ++i) first[i + 1] += first[i];
  std::vector<int> out(first[n]), fill(first.begin(), first.end() - 1);
  for (const auto& node : nodes_) {
    for (const auto& e : node.inputs_) out[fill[e.node]++] = node.id_;
    for (int c : node.control_inputs_) out[fill[c]++] = node.id_;
  }
  std::vector<int> order;
  order.reserve(n);
  for (const auto& node : nodes_) {
    if (pending[node.id_] == 0) order.push_back(node.id_);
  }
  for (size_t i = 0; i < order.size(); ++i) {
    for (int k = first[order[i]]; k < first[order[i] + 1]; ++k) {
      if (--pending[out[k]] == 0) order.push_back(out[k]);
    }
  }
  if (order.size() != nodes_.size()) return FindCycle();
  for (auto& n : nodes_) {
    if (!n.inferred_) n.op_def_ = nullptr;
  }
  for (int id : order) {
    if (!nodes_[id].inferred_) RETURN_IF_ERROR(CheckNode(nodes_[id], /*resolved=*/true));
  }
  topo_order_ = std::move(order);
  validated_ = true;
  return Status::OK();
}

std::vector<std::vector<std::pair<int, int>>> Graph::Consumers() const {
  std::vector<std::vector<std::pair<int, int>>> out(nodes_.size());
  for (const auto& n : nodes_) {
    for (size_t i = 0; i < n.inputs_.size(); ++i) {
      out[n.inputs_[i].node].push_back({n.id_, static_cast<int>(i)});
    }
    for (int c : n.control_inputs_) out[c].push_back({n.id_, -1});
  }
  return out;
}

}  // namespace dflow
