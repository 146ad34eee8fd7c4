#include "onnx/onnx_export.h"

#include <algorithm>
#include <map>
#include <set>

#include "onnx/onnx_headers.h"
#include "onnx/tensor_proto.h"
#include "serialization/file_util.h"

namespace dflow::onnx {
namespace {

constexpr int64_t kOpset = 17;

// The ONNX value name of a dflow tensor: the node's name for output 0, "NODE:INDEX" otherwise.
std::string ValueName(const std::string& node, int index) {
  return index == 0 ? node : node + ":" + std::to_string(index);
}

// What one node's export sees: the node, its inputs' ONNX names, and the model being written.
class Writer {
 public:
  Writer(::onnx::GraphProto& g, const Node& node, std::vector<std::string> inputs)
      : g_(g), node_(node), inputs_(std::move(inputs)) {}

  const Node& node() const { return node_; }
  const std::string& in(int i) const { return inputs_.at(i); }
  std::string out(int i = 0) const { return ValueName(node_.name(), i); }

  // Adds an ONNX node of `op` named after the dflow node (with `suffix` when it takes several).
  ::onnx::NodeProto* Add(const std::string& op, const std::vector<std::string>& inputs,
                         const std::vector<std::string>& outputs, const std::string& suffix = "") {
    auto* n = g_.add_node();
    n->set_op_type(op);
    n->set_name(node_.name() + suffix);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return n;
  }
  // An int64 initializer named after the node with `suffix`.
  std::string Ints(const std::string& suffix, const std::vector<int64_t>& values) {
    auto* t = g_.add_initializer();
    t->set_name(node_.name() + suffix);
    t->set_data_type(::onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
    return t->name();
  }

  Result<std::vector<int64_t>> IntsAttr(const std::string& name) const {
    const AttrValue* a = node_.FindAttr(name);
    if (a == nullptr || !std::holds_alternative<std::vector<int64_t>>(*a)) {
      return InvalidArgument("attribute '{}' is missing", name);
    }
    return std::get<std::vector<int64_t>>(*a);
  }
  int64_t IntAttr(const std::string& name, int64_t fallback) const {
    const AttrValue* a = node_.FindAttr(name);
    return a != nullptr && std::holds_alternative<int64_t>(*a) ? std::get<int64_t>(*a) : fallback;
  }
  bool BoolAttr(const std::string& name) const {
    const AttrValue* a = node_.FindAttr(name);
    return a != nullptr && std::holds_alternative<bool>(*a) && std::get<bool>(*a);
  }

 private:
  ::onnx::GraphProto& g_;
  const Node& node_;
  std::vector<std::string> inputs_;
};

void SetInts(::onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void SetInt(::onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

using Exporter = Status (*)(Writer& w);

template <const char* kOp>
Status Same(Writer& w) {
  std::vector<std::string> in;
  for (size_t i = 0; i < w.node().inputs().size(); ++i) in.push_back(w.in(static_cast<int>(i)));
  w.Add(kOp, in, {w.out()});
  return Status::OK();
}

constexpr char kAdd[] = "Add", kSub[] = "Sub", kMul[] = "Mul", kDiv[] = "Div", kMax[] = "Max",
               kMin[] = "Min", kPow[] = "Pow", kRelu[] = "Relu", kSigmoid[] = "Sigmoid",
               kTanh[] = "Tanh", kExp[] = "Exp", kLog[] = "Log", kNeg[] = "Neg", kSqrt[] = "Sqrt",
               kAbs[] = "Abs", kErf[] = "Erf", kIdentity[] = "Identity";

// dflow's MatMul is 2-D: ONNX's Gemm with its transposes.
Status MatMul(Writer& w) {
  auto* n = w.Add("Gemm", {w.in(0), w.in(1)}, {w.out()});
  if (w.BoolAttr("transpose_a")) SetInt(n, "transA", 1);
  if (w.BoolAttr("transpose_b")) SetInt(n, "transB", 1);
  return Status::OK();
}

Status BatchMatMul(Writer& w) {
  if (w.BoolAttr("transpose_a") || w.BoolAttr("transpose_b")) {
    return Unimplemented("a transposed BatchMatMul is not exported yet");
  }
  w.Add("MatMul", {w.in(0), w.in(1)}, {w.out()});
  return Status::OK();
}

// Both take the bias along the last dimension, which ONNX's broadcasting gives Add.
Status BiasAdd(Writer& w) {
  w.Add("Add", {w.in(0), w.in(1)}, {w.out()});
  return Status::OK();
}

// NCHW and OIHW, pads [top, left, bottom, right] in both.
Status Conv2D(Writer& w) {
  auto* n = w.Add("Conv", {w.in(0), w.in(1)}, {w.out()});
  for (const char* attr : {"strides", "pads", "dilations"}) {
    ASSIGN_OR_RETURN(auto v, w.IntsAttr(attr));
    SetInts(n, attr, v);
  }
  SetInt(n, "group", w.IntAttr("groups", 1));
  return Status::OK();
}

Status MaxPool(Writer& w) {
  auto* n = w.Add("MaxPool", {w.in(0)}, {w.out()});
  ASSIGN_OR_RETURN(auto k, w.IntsAttr("ksize"));
  SetInts(n, "kernel_shape", k);
  for (const char* attr : {"strides", "pads"}) {
    ASSIGN_OR_RETURN(auto v, w.IntsAttr(attr));
    SetInts(n, attr, v);
  }
  return Status::OK();
}

// A 0 in dflow's shape is a dimension of 0, as with ONNX's allowzero.
Status Reshape(Writer& w) {
  ASSIGN_OR_RETURN(auto shape, w.IntsAttr("shape"));
  auto* n = w.Add("Reshape", {w.in(0), w.Ints("/shape", shape)}, {w.out()});
  if (std::count(shape.begin(), shape.end(), 0) > 0) SetInt(n, "allowzero", 1);
  return Status::OK();
}

Status Transpose(Writer& w) {
  ASSIGN_OR_RETURN(auto perm, w.IntsAttr("perm"));
  SetInts(w.Add("Transpose", {w.in(0)}, {w.out()}), "perm", perm);
  return Status::OK();
}

Status Concat(Writer& w) {
  std::vector<std::string> in;
  for (size_t i = 0; i < w.node().inputs().size(); ++i) in.push_back(w.in(static_cast<int>(i)));
  SetInt(w.Add("Concat", in, {w.out()}), "axis", w.IntAttr("axis", 0));
  return Status::OK();
}

// Over the last dimension in dflow; ONNX's axis -1 (opset 13 on) is the same.
template <const char* kOp>
Status LastAxis(Writer& w) {
  SetInt(w.Add(kOp, {w.in(0)}, {w.out()}), "axis", -1);
  return Status::OK();
}
constexpr char kSoftmax[] = "Softmax", kLogSoftmax[] = "LogSoftmax";

const std::map<std::string, Exporter>& Exporters() {
  static const auto* table = new std::map<std::string, Exporter>{
      {"Add", Same<kAdd>},
      {"Sub", Same<kSub>},
      {"Mul", Same<kMul>},
      {"Div", Same<kDiv>},
      {"Maximum", Same<kMax>},
      {"Minimum", Same<kMin>},
      {"Pow", Same<kPow>},
      {"Relu", Same<kRelu>},
      {"Sigmoid", Same<kSigmoid>},
      {"Tanh", Same<kTanh>},
      {"Exp", Same<kExp>},
      {"Log", Same<kLog>},
      {"Neg", Same<kNeg>},
      {"Sqrt", Same<kSqrt>},
      {"Abs", Same<kAbs>},
      {"Erf", Same<kErf>},
      {"Identity", Same<kIdentity>},
      {"MatMul", MatMul},
      {"BatchMatMul", BatchMatMul},
      {"BiasAdd", BiasAdd},
      {"Conv2D", Conv2D},
      {"MaxPool", MaxPool},
      {"Reshape", Reshape},
      {"Transpose", Transpose},
      {"Concat", Concat},
      {"Softmax", LastAxis<kSoftmax>},
      {"LogSoftmax", LastAxis<kLogSoftmax>},
  };
  return *table;
}

void SetType(::onnx::ValueInfoProto* v, const std::string& name, DType dtype, const Shape& shape) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(OnnxTypeOf(dtype));
  if (shape.unknown_rank()) return;
  auto* s = tt->mutable_shape();
  for (int i = 0; i < shape.rank(); ++i) {
    auto* d = s->add_dim();
    if (shape[i] >= 0) {
      d->set_dim_value(shape[i]);
    } else {
      d->set_dim_param(i == 0 ? "N" : fmt::format("{}_d{}", name, i));
    }
  }
}

}  // namespace

Result<std::string> ExportModelBytes(
    const Graph& graph, const std::vector<std::string>& outputs,
    const std::function<Result<Tensor>(const std::string& variable)>& variable_value,
    const ExportOptions& options) {
  if (!graph.validated()) return FailedPrecondition("export needs a validated graph");
  if (outputs.empty()) return InvalidArgument("export: no outputs to export were given");
  // The nodes the outputs depend on, through data edges.
  std::vector<InputRef> fetched;
  std::vector<bool> needed(graph.num_nodes(), false);
  std::vector<int> stack;
  for (const auto& o : outputs) {
    ASSIGN_OR_RETURN(InputRef ref, ParseInputRef(o));
    auto id = graph.FindNode(ref.node);
    if (!id) return NotFound("export: the graph has no node '{}' (for output '{}')", ref.node, o);
    if (ref.index >= graph.node(*id).num_outputs()) {
      return NotFound("export: node '{}' ({}) has {} outputs, so no '{}'", ref.node,
                      graph.node(*id).op(), graph.node(*id).num_outputs(), o);
    }
    fetched.push_back(ref);
    stack.push_back(*id);
  }
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (needed[id]) continue;
    needed[id] = true;
    for (const auto& e : graph.node(id).inputs()) stack.push_back(e.node);
  }

  ::onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("dflow");
  model.add_opset_import()->set_version(kOpset);
  ::onnx::GraphProto& g = *model.mutable_graph();
  g.set_name(options.graph_name);
  const auto& exporters = Exporters();
  for (int id : graph.topological_order()) {
    if (!needed[id]) continue;
    const Node& node = graph.node(id);
    const std::string label = fmt::format("export: node '{}' ({}): ", node.name(), node.op());
    if (node.role() == OpRole::kPlaceholder) {
      if (OnnxTypeOf(node.output_dtype(0)) == ::onnx::TensorProto::UNDEFINED) {
        return InvalidArgument("{}dtype {} has no ONNX form here", label,
                               DTypeName(node.output_dtype(0)));
      }
      SetType(g.add_input(), node.name(), node.output_dtype(0), node.output_shape(0));
      continue;
    }
    if (node.op() == "Const" || node.role() == OpRole::kVariable) {
      Tensor value;
      if (node.op() == "Const") {
        value = std::get<Tensor>(*node.FindAttr("value"));
      } else {
        auto read = variable_value(node.name());
        if (!read.ok()) return read.status().WithPrefix(label + "reading its value: ");
        value = std::move(*read);
      }
      auto proto = ToTensorProto(value, node.name());
      if (!proto.ok()) return proto.status().WithPrefix(label);
      *g.add_initializer() = std::move(*proto);
      continue;
    }
    auto it = exporters.find(node.op());
    if (it == exporters.end()) {
      return InvalidArgument("{}the op has no ONNX form in the exporter (it writes {})", label,
                             fmt::join(ExportedOps(), ", "));
    }
    std::vector<std::string> inputs;
    for (const auto& e : node.inputs()) {
      inputs.push_back(ValueName(graph.node(e.node).name(), e.index));
    }
    Writer w(g, node, std::move(inputs));
    if (Status s = it->second(w); !s.ok()) return s.WithPrefix(label);
  }
  std::set<std::string> seen;
  for (const InputRef& ref : fetched) {
    const std::string name = ValueName(ref.node, ref.index);
    if (!seen.insert(name).second) continue;
    const Node& node = graph.node(*graph.FindNode(ref.node));
    SetType(g.add_output(), name, node.output_dtype(ref.index), node.output_shape(ref.index));
  }
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return Internal("export: the model written fails ONNX's checker: {}", e.what());
  }
  return model.SerializeAsString();
}

Status ExportModel(Session& session, const std::vector<std::string>& outputs,
                   const std::string& path, const ExportOptions& options) {
  auto read = [&](const std::string& variable) -> Result<Tensor> {
    ASSIGN_OR_RETURN(auto values, session.Run({}, {variable + ":0"}));
    return values.at(0);
  };
  ASSIGN_OR_RETURN(std::string bytes, ExportModelBytes(session.graph(), outputs, read, options));
  Status written = serialization::WriteFileAtomically(path, bytes);
  if (!written.ok()) return written.WithPrefix("export to '" + path + "': ");
  return Status::OK();
}

std::vector<std::string> ExportedOps() {
  std::vector<std::string> ops = {"Const", "Placeholder", "Variable"};
  for (const auto& [op, exporter] : Exporters()) ops.push_back(op);
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace dflow::onnx
