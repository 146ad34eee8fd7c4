#include "onnx/onnx_import.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <map>
#include <set>

#include "onnx/node_context.h"
#include "onnx/onnx_headers.h"
#include "onnx/tensor_proto.h"
#include "ops/array_ops.h"
#include "ops/register.h"
#include "ops/state_ops.h"
#include "runtime/session.h"
#include "serialization/file_util.h"

namespace dflow::onnx {

// ---- Values and NodeContext -------------------------------------------------------------------

Result<Output> Values::Get(const std::string& name) {
  if (auto it = outputs_.find(name); it != outputs_.end()) return it->second;
  auto it = constants_.find(name);
  if (it != constants_.end() && IsTrainable(name)) {
    std::string var_name = trainable_.at(name);
    while (root_.graph().FindNode(var_name)) var_name += "_var";
    Output var = ops::Variable(root_.WithOpName(var_name), it->second.shape(), it->second.dtype());
    Scope under = root_.WithNameScope(var_name);
    Output init = ops::Assign(under.WithOpName("init"), var,
                              ops::Const(under.WithOpName("initial_value"), it->second));
    if (!root_.ok()) return root_.status();
    variables_.push_back(var);
    assigns_.push_back(init);
    outputs_[name] = var;
    return var;
  }
  if (it != constants_.end()) {
    Output c = ops::Const(root_, it->second);
    if (!root_.ok()) return root_.status();
    outputs_[name] = c;
    return c;
  }
  return InvalidArgument("value '{}' is used before any node makes it", name);
}

const Tensor* Values::Constant(const std::string& name) const {
  auto it = constants_.find(name);
  return it == constants_.end() ? nullptr : &it->second;
}

Result<Output> NodeContext::input(int i) {
  if (!has_input(i)) return InvalidArgument("input {} is missing", i);
  return values_.Get(node_.input(i));
}

Result<Tensor> NodeContext::constant_input(int i) const {
  if (!has_input(i)) return InvalidArgument("input {} is missing", i);
  const Tensor* t = values_.Constant(node_.input(i));
  if (t == nullptr) {
    return Unimplemented("input {} ('{}') must be known at import (an initializer or a Constant)",
                         i, node_.input(i));
  }
  return *t;
}

Result<std::vector<int64_t>> NodeContext::ints_input(int i) const {
  ASSIGN_OR_RETURN(Tensor t, constant_input(i));
  std::vector<int64_t> v;
  if (t.dtype() == DType::kI64) {
    for (int64_t x : t.ToVector<int64_t>()) v.push_back(x);
  } else if (t.dtype() == DType::kI32) {
    for (int32_t x : t.ToVector<int32_t>()) v.push_back(x);
  } else {
    return InvalidArgument("input {} is {}, expected integers", i, DTypeName(t.dtype()));
  }
  return v;
}

const ::onnx::AttributeProto* NodeContext::attr(const std::string& name) const {
  for (const auto& a : node_.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t NodeContext::attr_int(const std::string& name, int64_t fallback) const {
  const auto* a = attr(name);
  return a ? a->i() : fallback;
}

float NodeContext::attr_float(const std::string& name, float fallback) const {
  const auto* a = attr(name);
  return a ? a->f() : fallback;
}

std::string NodeContext::attr_string(const std::string& name, const std::string& fallback) const {
  const auto* a = attr(name);
  return a ? a->s() : fallback;
}

std::optional<std::vector<int64_t>> NodeContext::attr_ints(const std::string& name) const {
  const auto* a = attr(name);
  if (a == nullptr) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

void NodeContext::set_output(int i, Output o) {
  if (wants_output(i)) values_.SetOutput(node_.output(i), o);
}

void NodeContext::set_constant_output(int i, Tensor t) {
  if (wants_output(i)) values_.SetConstant(node_.output(i), std::move(t));
}

// ---- The importer -----------------------------------------------------------------------------

namespace {

// A dflow node name for an ONNX name: ':' separates a node's outputs in dflow, and a leading '/'
// (PyTorch's "/layer1/conv/Conv") would make an empty name scope.
std::string DflowName(std::string name) {
  std::replace(name.begin(), name.end(), ':', '_');
  while (!name.empty() && name.front() == '/') name.erase(name.begin());
  return name;
}

// The model's graph inputs: dtype and shape (unknown and symbolic dimensions -1).
Result<std::pair<DType, Shape>> InputType(const ::onnx::ValueInfoProto& info) {
  if (!info.type().has_tensor_type()) {
    return Unimplemented(
        "graph input '{}' is not a tensor (sequences, maps and optionals are "
        "not imported)",
        info.name());
  }
  const auto& tt = info.type().tensor_type();
  auto dtype = DTypeOfOnnx(tt.elem_type());
  if (!dtype.ok()) return dtype.status().WithPrefix("graph input '" + info.name() + "': ");
  if (!tt.has_shape()) return std::make_pair(*dtype, Shape::Unknown());
  std::vector<int64_t> dims;
  for (const auto& d : tt.shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  auto shape = Shape::Make(dims);
  if (!shape.ok()) return shape.status().WithPrefix("graph input '" + info.name() + "': ");
  return std::make_pair(*dtype, *shape);
}

// "model 'M': node 'N' (Op, opset K): ", the start of every error about a node.
std::string NodeLabel(const std::string& model, const ::onnx::NodeProto& node, int64_t opset) {
  return fmt::format("model '{}': node '{}' ({}{}, opset {}): ", model, node.name(), node.op_type(),
                     node.domain().empty() ? "" : ", domain " + node.domain(), opset);
}

// The declared rank of every value whose type the file gives before inference: graph inputs
// and initializers.
std::map<std::string, int> DeclaredRanks(const ::onnx::GraphProto& g) {
  std::map<std::string, int> ranks;
  for (const auto& in : g.input()) {
    if (in.type().has_tensor_type() && in.type().tensor_type().has_shape()) {
      ranks[in.name()] = in.type().tensor_type().shape().dim_size();
    }
  }
  for (const auto& init : g.initializer()) ranks[init.name()] = init.dims_size();
  return ranks;
}

Status CheckImportable(const ::onnx::ModelProto& model, const std::string& name, int64_t opset) {
  const auto& converters = Converters();
  const ::onnx::GraphProto& g = model.graph();
  const std::map<std::string, int> ranks = DeclaredRanks(g);
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& node = g.node(i);
    const std::string label = NodeLabel(name, node, opset);
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      return Unimplemented("{}dflow imports the default ONNX domain only", label);
    }
    if (!converters.count(node.op_type())) {
      return Unimplemented("{}dflow does not import this op", label);
    }
    // The windowed ops: the input and the weights (when their ranks are declared) and the
    // window's attributes must agree on the number of spatial dimensions.
    const std::string& op = node.op_type();
    const bool weighted = op == "Conv" || op == "ConvTranspose";
    if (weighted || op == "MaxPool" || op == "AveragePool") {
      int spatial = -1;
      for (int k = 0; k < std::min(node.input_size(), weighted ? 2 : 1); ++k) {
        auto it = ranks.find(node.input(k));
        if (it == ranks.end()) continue;
        if (it->second < 3) {
          return InvalidArgument("{}input {} has rank {}, less than 3", label, k, it->second);
        }
        if (spatial >= 0 && it->second - 2 != spatial) {
          return InvalidArgument("{}the input and the weights have different ranks", label);
        }
        spatial = it->second - 2;
      }
      for (const auto& a : node.attribute()) {
        const std::string& n = a.name();
        if (n != "kernel_shape" && n != "strides" && n != "dilations" && n != "pads" &&
            n != "output_padding") {
          continue;
        }
        const int want = spatial < 0 ? -1 : (n == "pads" ? 2 * spatial : spatial);
        if (want >= 0 && a.ints_size() != want) {
          return InvalidArgument("{}attribute {} has {} values for {} spatial dimensions", label, n,
                                 a.ints_size(), spatial);
        }
        for (int64_t v : a.ints()) {
          if (n == "pads" ? v < 0 : v <= 0) {
            return InvalidArgument("{}attribute {} holds {}", label, n, v);
          }
        }
      }
    }
  }
  return Status::OK();
}

// The largest output a node folded at import may have; larger ones stay computed at run time.
constexpr size_t kMaxFoldedBytes = size_t{64} << 20;

// Constant folding: a node whose inputs are all known at import (initializers, Constants,
// shapes, the results of nodes folded before it) is converted into a graph of its own and run
// there on the CPU, and its outputs become known values, so that shape arithmetic (Shape,
// Gather, Concat into a Reshape, as exporters write it) gives the constant inputs the converters
// need. Returns false when the node is not folded (an input not known, or the node refused,
// failed or gave too large a result: the normal conversion then reports what is wrong).
bool FoldConstantNode(Values& values, const ::onnx::NodeProto& node, Converter convert,
                      int64_t opset) {
  bool any_input = false;
  for (const auto& in : node.input()) {
    if (in.empty()) continue;
    if (values.Constant(in) == nullptr || values.IsTrainable(in)) return false;
    any_input = true;
  }
  if (!any_input) return false;
  Scope root = Scope::NewRootScope();
  Values local(root);
  for (const auto& in : node.input()) {
    if (!in.empty()) local.SetConstant(in, *values.Constant(in));
  }
  NodeContext ctx(local, node, root.WithNameScope("fold"), opset);
  if (!convert(ctx).ok() || !root.ok()) return false;
  std::vector<std::string> fetch;
  std::vector<int> computed;  // the outputs fetched, by index
  for (int o = 0; o < node.output_size(); ++o) {
    const std::string& name = node.output(o);
    if (name.empty() || local.Constant(name) != nullptr) continue;
    auto value = local.Get(name);
    if (!value.ok()) return false;
    fetch.push_back(value->name());
    computed.push_back(o);
  }
  std::vector<Tensor> results;
  if (!fetch.empty()) {
    // Bounded: a hostile file's constant Range or Expand must not take the machine's memory.
    SessionOptions options;
    options.device_memory_bytes = 4.0 * kMaxFoldedBytes;
    auto session = Session::Create(root, options);
    if (!session.ok()) return false;
    auto out = (*session)->Run({}, fetch);
    if (!out.ok()) return false;
    results = std::move(*out);
  }
  for (const Tensor& t : results) {
    if (t.num_bytes() > kMaxFoldedBytes) return false;
  }
  for (int o = 0; o < node.output_size(); ++o) {
    const std::string& name = node.output(o);
    if (const Tensor* t = name.empty() ? nullptr : local.Constant(name)) {
      values.SetConstant(name, *t);
    }
  }
  for (size_t k = 0; k < computed.size(); ++k) {
    values.SetConstant(node.output(computed[k]), std::move(results[k]));
  }
  return true;
}

}  // namespace

Result<ImportedModel> ImportModelBytes(std::string_view bytes, const std::string& name,
                                       const std::string& dir, const ImportOptions& options) {
  if (bytes.size() > options.max_model_bytes || bytes.size() > INT_MAX) {
    return InvalidArgument("model '{}' is {} bytes, more than the {} allowed", name, bytes.size(),
                           std::min<size_t>(options.max_model_bytes, INT_MAX));
  }
  ::onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return InvalidArgument("model '{}' is not an ONNX model (protobuf parse failed)", name);
  }
  ImportedModel out;
  out.ir_version = model.ir_version();
  for (const auto& op : model.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") out.opset = op.version();
  }
  // Ops and domains dflow does not import are refused before ONNX's checker and shape inference
  // see the model: ONNX 1.12's shape inference crashes on some malformed nodes (a ConvInteger
  // whose weights have another rank than its input), so only what dflow imports, checked here
  // first, reaches it.
  RETURN_IF_ERROR(CheckImportable(model, name, out.opset));
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return InvalidArgument("model '{}' fails ONNX's checker: {}", name, e.what());
  }
  try {
    // With data propagation: the shapes computed by Shape, Gather, Concat, ... are followed
    // into the Reshapes they feed, so their outputs keep the dimensions known at import.
    ::onnx::shape_inference::InferShapes(model, ::onnx::OpSchemaRegistry::Instance(),
                                         ::onnx::ShapeInferenceOptions(false, 0, true));
  } catch (const std::exception& e) {
    return InvalidArgument("model '{}' fails ONNX's shape inference: {}", name, e.what());
  }
  ops::RegisterStandardOps();
  Scope root = Scope::NewRootScope();
  Values values(root);
  const ::onnx::GraphProto& g = model.graph();
  for (const auto& info : g.value_info()) {
    if (!info.type().has_tensor_type() || !info.type().tensor_type().has_shape()) continue;
    std::vector<int64_t> dims;
    for (const auto& d : info.type().tensor_type().shape().dim()) {
      dims.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
    }
    if (dims.size() <= Shape::kMaxRank) values.SetInferred(info.name(), std::move(dims));
  }
  // Statistics, not parameters: BatchNormalization's running mean and variance stay constants.
  std::set<std::string> frozen;
  for (const auto& node : g.node()) {
    if (node.op_type() != "BatchNormalization") continue;
    for (int i = 3; i < std::min(node.input_size(), 5); ++i) frozen.insert(node.input(i));
  }
  for (const auto& init : g.initializer()) {
    auto t = FromTensorProto(init, dir, "initializer '" + init.name() + "'");
    if (!t.ok()) return t.status().WithPrefix("model '" + name + "': ");
    const bool trainable =
        options.trainable_initializers && t->dtype() == DType::kF32 && !frozen.count(init.name());
    values.SetConstant(init.name(), std::move(*t));
    if (trainable) values.SetTrainable(init.name(), DflowName(init.name()));
  }
  for (const auto& in : g.input()) {
    if (values.Has(in.name())) continue;  // an initializer's default listed as an input
    auto type = InputType(in);
    if (!type.ok()) return type.status().WithPrefix("model '" + name + "': ");
    Output p = ops::Placeholder(root.WithOpName(DflowName(in.name())), type->first, type->second);
    if (!root.ok()) return root.status();
    values.SetOutput(in.name(), p);
    out.inputs.push_back(p.node_name());
  }
  const auto& converters = Converters();
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& node = g.node(i);
    const std::string label = NodeLabel(name, node, out.opset);
    const Converter convert = converters.at(node.op_type());  // CheckImportable made sure
    if (FoldConstantNode(values, node, convert, out.opset)) continue;
    std::string scope_name = DflowName(node.name());
    if (scope_name.empty()) scope_name = fmt::format("{}_{}", node.op_type(), i);
    NodeContext ctx(values, node, root.WithNameScope(scope_name), out.opset);
    Status s = convert(ctx);
    if (s.ok()) s = root.status();
    if (!s.ok()) return s.WithPrefix(label);
    for (int o = 0; o < node.output_size(); ++o) {
      if (!node.output(o).empty() && !values.Has(node.output(o))) {
        return Unimplemented("{}output {} ('{}') is not imported", label, o, node.output(o));
      }
    }
  }
  std::set<std::string> taken;
  for (int v = 0; v < root.graph().num_nodes(); ++v) taken.insert(root.graph().node(v).name());
  for (const auto& o : g.output()) {
    auto value = values.Get(o.name());
    if (!value.ok()) return value.status().WithPrefix("model '" + name + "': graph output: ");
    std::string out_name = DflowName(o.name());
    while (taken.count(out_name)) out_name += "_out";
    taken.insert(out_name);
    Output id = ops::Identity(root.WithOpName(out_name), *value);
    if (!root.ok()) return root.status();
    out.outputs.push_back(id.name());
  }
  for (const Output& v : values.variables()) out.variables.push_back(v.name());
  for (const Output& a : values.assigns()) out.assigns.push_back(a.name());
  if (!values.assigns().empty() && !options.init_op.empty()) {
    std::string init_name = options.init_op;
    while (taken.count(init_name)) init_name += "_op";
    out.init = ops::NoOp(root.WithOpName(init_name).WithControlDependencies(values.assigns()))
                   .node.node_name();
    if (!root.ok()) return root.status();
  }
  out.graph = root.graph();
  if (Status s = out.graph.Validate(); !s.ok()) return s.WithPrefix("model '" + name + "': ");
  return out;
}

Result<ImportedModel> ImportModel(const std::string& path, const ImportOptions& options) {
  ASSIGN_OR_RETURN(std::string bytes, serialization::ReadFile(path, options.max_model_bytes));
  std::string dir = std::filesystem::path(path).parent_path().string();
  return ImportModelBytes(bytes, path, dir.empty() ? "." : dir, options);
}

Result<Tensor> ReadTensorFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, serialization::ReadFile(path));
  ::onnx::TensorProto proto;
  if (bytes.size() > INT_MAX ||
      !proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return InvalidArgument("'{}' is not a serialized ONNX TensorProto", path);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  return FromTensorProto(proto, dir.empty() ? "." : dir, "'" + path + "'");
}

std::vector<std::string> ImportedOps() {
  std::vector<std::string> ops;
  for (const auto& [op, converter] : Converters()) ops.push_back(op);
  return ops;
}

}  // namespace dflow::onnx
