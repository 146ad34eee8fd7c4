#include "serialization/graph_file.h"

#include <flatbuffers/idl.h>

#include "graph/huge_page_allocator.h"
#include "serialization/file_util.h"
#include "serialization/schema/graph_generated.h"
#include "serialization/schema_text.h"
#include "serialization/tensor_codec.h"
#include "serialization/verified_root.h"

namespace dflow::serialization {
namespace {

static_assert(static_cast<int>(fb::AttrType::MAX) == static_cast<int>(AttrType::kTensorList),
              "schema/graph.fbs AttrType must list dflow::AttrType in order");

using Builder = flatbuffers::FlatBufferBuilder;

// The builder's buffer of a large graph (about 100 bytes a node) on transparent huge pages.
class HugePageBufferAllocator : public flatbuffers::Allocator {
 public:
  uint8_t* allocate(size_t size) override { return pages_.allocate(size); }
  void deallocate(uint8_t* p, size_t size) override { pages_.deallocate(p, size); }

 private:
  HugePageAllocator<uint8_t> pages_;
};

flatbuffers::Offset<fb::Attr> EncodeAttr(Builder& b, const std::string& name,
                                         const AttrValue& value) {
  // Children first: a table's builder must not be interleaved with other objects.
  flatbuffers::Offset<flatbuffers::String> s;
  flatbuffers::Offset<fb::Shape> shape;
  flatbuffers::Offset<fb::Tensor> tensor;
  flatbuffers::Offset<flatbuffers::Vector<int64_t>> ints;
  flatbuffers::Offset<flatbuffers::Vector<double>> floats;
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> bools;
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> strings;
  flatbuffers::Offset<flatbuffers::Vector<fb::DType>> dtypes;
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Shape>>> shapes;
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Tensor>>> tensors;
  switch (TypeOf(value)) {
    case AttrType::kString:
      s = b.CreateString(std::get<std::string>(value));
      break;
    case AttrType::kShape:
      shape = EncodeShape(b, std::get<Shape>(value));
      break;
    case AttrType::kTensor:
      tensor = EncodeTensor(b, std::get<Tensor>(value));
      break;
    case AttrType::kIntList:
      ints = b.CreateVector(std::get<std::vector<int64_t>>(value));
      break;
    case AttrType::kFloatList:
      floats = b.CreateVector(std::get<std::vector<double>>(value));
      break;
    case AttrType::kBoolList:
      bools = b.CreateVector(std::get<std::vector<bool>>(value));
      break;
    case AttrType::kStringList:
      strings = b.CreateVectorOfStrings(std::get<std::vector<std::string>>(value));
      break;
    case AttrType::kDTypeList: {
      std::vector<fb::DType> v;
      for (DType d : std::get<std::vector<DType>>(value)) v.push_back(static_cast<fb::DType>(d));
      dtypes = b.CreateVector(v);
      break;
    }
    case AttrType::kShapeList: {
      std::vector<flatbuffers::Offset<fb::Shape>> v;
      for (const Shape& x : std::get<std::vector<Shape>>(value)) v.push_back(EncodeShape(b, x));
      shapes = b.CreateVector(v);
      break;
    }
    case AttrType::kTensorList: {
      std::vector<flatbuffers::Offset<fb::Tensor>> v;
      for (const Tensor& x : std::get<std::vector<Tensor>>(value)) v.push_back(EncodeTensor(b, x));
      tensors = b.CreateVector(v);
      break;
    }
    default:
      break;
  }
  auto name_offset = b.CreateSharedString(name);  // attribute names repeat: stored once
  fb::AttrBuilder a(b);
  a.add_name(name_offset);
  a.add_type(static_cast<fb::AttrType>(TypeOf(value)));
  switch (TypeOf(value)) {
    case AttrType::kInt:
      a.add_i(std::get<int64_t>(value));
      break;
    case AttrType::kFloat:
      a.add_f(std::get<double>(value));
      break;
    case AttrType::kBool:
      a.add_b(std::get<bool>(value));
      break;
    case AttrType::kDType:
      a.add_dtype(static_cast<fb::DType>(std::get<DType>(value)));
      break;
    case AttrType::kString:
      a.add_s(s);
      break;
    case AttrType::kShape:
      a.add_shape(shape);
      break;
    case AttrType::kTensor:
      a.add_tensor(tensor);
      break;
    case AttrType::kIntList:
      a.add_ints(ints);
      break;
    case AttrType::kFloatList:
      a.add_floats(floats);
      break;
    case AttrType::kBoolList:
      a.add_bools(bools);
      break;
    case AttrType::kStringList:
      a.add_strings(strings);
      break;
    case AttrType::kDTypeList:
      a.add_dtypes(dtypes);
      break;
    case AttrType::kShapeList:
      a.add_shapes(shapes);
      break;
    case AttrType::kTensorList:
      a.add_tensors(tensors);
      break;
  }
  return a.Finish();
}

Result<AttrValue> DecodeAttr(const fb::Attr& a, const Where& where) {
  switch (a.type()) {
    case fb::AttrType::INT:
      return AttrValue(a.i());
    case fb::AttrType::FLOAT:
      return AttrValue(a.f());
    case fb::AttrType::BOOL:
      return AttrValue(a.b());
    case fb::AttrType::STRING:
      return AttrValue(a.s() == nullptr ? std::string() : a.s()->str());
    case fb::AttrType::DTYPE: {
      ASSIGN_OR_RETURN(DType d, DecodeDType(a.dtype(), where));
      return AttrValue(d);
    }
    case fb::AttrType::SHAPE: {
      ASSIGN_OR_RETURN(Shape s, DecodeShape(a.shape(), where));
      return AttrValue(s);
    }
    case fb::AttrType::TENSOR: {
      ASSIGN_OR_RETURN(Tensor t, DecodeTensor(a.tensor(), where));
      return AttrValue(t);
    }
    case fb::AttrType::INT_LIST: {
      return AttrValue(ScalarsOf(a.ints()));
    }
    case fb::AttrType::FLOAT_LIST: {
      return AttrValue(ScalarsOf(a.floats()));
    }
    case fb::AttrType::BOOL_LIST: {
      std::vector<bool> v;
      if (a.bools() != nullptr) {
        for (uint8_t x : *a.bools()) v.push_back(x != 0);
      }
      return AttrValue(std::move(v));
    }
    case fb::AttrType::STRING_LIST: {
      std::vector<std::string> v;
      if (a.strings() != nullptr) {
        for (const auto* x : *a.strings()) v.push_back(x->str());
      }
      return AttrValue(std::move(v));
    }
    case fb::AttrType::DTYPE_LIST: {
      std::vector<DType> v;
      if (a.dtypes() != nullptr) {
        for (fb::DType x : *a.dtypes()) {
          ASSIGN_OR_RETURN(DType d, DecodeDType(x, where));
          v.push_back(d);
        }
      }
      return AttrValue(std::move(v));
    }
    case fb::AttrType::SHAPE_LIST: {
      std::vector<Shape> v;
      if (a.shapes() != nullptr) {
        for (const auto* x : *a.shapes()) {
          ASSIGN_OR_RETURN(Shape s, DecodeShape(x, where));
          v.push_back(s);
        }
      }
      return AttrValue(std::move(v));
    }
    case fb::AttrType::TENSOR_LIST: {
      std::vector<Tensor> v;
      if (a.tensors() != nullptr) {
        for (const auto* x : *a.tensors()) {
          ASSIGN_OR_RETURN(Tensor t, DecodeTensor(x, where));
          v.push_back(std::move(t));
        }
      }
      return AttrValue(std::move(v));
    }
  }
  return InvalidArgument("{}: unknown attribute type {}", where.str(), static_cast<int>(a.type()));
}

// JSON text: no FlatBuffers identifier, and '{' first after any white space.
bool LooksLikeJson(std::string_view bytes) {
  if (bytes.size() >= 8 && flatbuffers::BufferHasIdentifier(bytes.data(), fb::GraphIdentifier())) {
    return false;
  }
  for (char c : bytes) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    return c == '{';
  }
  return false;
}

// A parser holding the graph schema, for the JSON form.
Result<std::unique_ptr<flatbuffers::Parser>> GraphParser() {
  auto parser = std::make_unique<flatbuffers::Parser>();
  parser->opts.strict_json = true;
  parser->opts.indent_step = 2;
  if (!parser->Parse(GraphSchemaText())) {
    return Internal("the embedded graph schema does not parse: {}", parser->error_);
  }
  return parser;
}

Result<const fb::Graph*> VerifiedGraph(std::string_view bytes, const std::string& source) {
  return VerifiedRoot<fb::Graph>(bytes, source, "graph file", fb::GraphIdentifier(),
                                 kGraphFormatVersion);
}

// Encodes into `b` (finished).
void EncodeGraphInto(Builder& b, const Graph& graph, const std::vector<std::string>& assigned) {
  std::vector<flatbuffers::Offset<fb::Node>> nodes;
  nodes.reserve(graph.num_nodes());
  std::vector<flatbuffers::Offset<flatbuffers::String>> strings;
  std::vector<flatbuffers::Offset<fb::Attr>> attrs;
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const NodeDef& def = graph.node(id).def();
    strings.clear();
    for (const InputRef& in : def.inputs) {
      strings.push_back(
          b.CreateString(in.index == 0 ? in.node : in.node + ":" + std::to_string(in.index)));
    }
    auto inputs = b.CreateVector(strings);
    strings.clear();
    for (const auto& c : def.control_inputs) strings.push_back(b.CreateString(c));
    auto controls = b.CreateVector(strings);
    attrs.clear();
    for (const auto& [name, value] : def.attrs) attrs.push_back(EncodeAttr(b, name, value));
    auto attr_vec = b.CreateVector(attrs);
    auto name = b.CreateString(def.name);
    // Ops, devices and groups repeat across nodes: each distinct one is stored once.
    auto op = b.CreateSharedString(def.op);
    auto device = def.device.empty() ? 0 : b.CreateSharedString(def.device);
    bool has_assigned = static_cast<size_t>(id) < assigned.size() && !assigned[id].empty();
    auto assigned_device = has_assigned ? b.CreateSharedString(assigned[id]) : 0;
    auto coloc = def.colocation_group.empty() ? 0 : b.CreateSharedString(def.colocation_group);
    nodes.push_back(
        fb::CreateNode(b, name, op, inputs, controls, attr_vec, device, assigned_device, coloc));
  }
  auto node_vec = b.CreateVector(nodes);
  b.Finish(fb::CreateGraph(b, kGraphFormatVersion, node_vec), fb::GraphIdentifier());
}

// About 100 bytes a node; the builder grows if not.
size_t InitialBufferBytes(const Graph& graph) {
  return 1024 + static_cast<size_t>(graph.num_nodes()) * 112;
}

}  // namespace

std::string EncodeGraph(const Graph& graph, const std::vector<std::string>& assigned) {
  HugePageBufferAllocator pages;
  Builder b(InitialBufferBytes(graph), &pages);
  EncodeGraphInto(b, graph, assigned);
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

Result<Graph> DecodeGraph(std::string_view bytes, const std::string& source,
                          std::vector<std::string>* assigned) {
  if (LooksLikeJson(bytes)) {
    ASSIGN_OR_RETURN(std::string binary, GraphJsonToBytes(bytes, source));
    return DecodeGraph(binary, source, assigned);
  }
  ASSIGN_OR_RETURN(const fb::Graph* g, VerifiedGraph(bytes, source));
  Graph graph;
  int count = g->nodes() == nullptr ? 0 : static_cast<int>(g->nodes()->size());
  graph.Reserve(count);
  if (assigned != nullptr) assigned->assign(count, "");
  for (int i = 0; i < count; ++i) {
    const fb::Node* n = g->nodes()->Get(i);
    auto where = [&] {
      return fmt::format("graph file '{}': node '{}'", source, n->name()->str());
    };
    NodeDef def;
    def.name = n->name()->str();
    def.op = n->op()->str();
    if (n->inputs() != nullptr) {
      for (const auto* in : *n->inputs()) {
        auto ref = ParseInputRef(in->string_view());
        if (!ref.ok()) return ref.status().WithPrefix(where() + ": ");
        def.inputs.push_back(*ref);
      }
    }
    if (n->control_inputs() != nullptr) {
      for (const auto* c : *n->control_inputs()) def.control_inputs.push_back(c->str());
    }
    if (n->attrs() != nullptr) {
      def.attrs.reserve(n->attrs()->size());
      for (const fb::Attr* a : *n->attrs()) {
        auto attr_where = [&] {
          return fmt::format("{}: attribute '{}'", where(), a->name()->str());
        };
        ASSIGN_OR_RETURN(AttrValue v, DecodeAttr(*a, attr_where));
        if (!def.attrs.emplace(a->name()->string_view(), std::move(v)).second) {
          return InvalidArgument("{}: attribute '{}' given twice", where(), a->name()->str());
        }
      }
    }
    if (n->device() != nullptr) def.device = n->device()->str();
    if (n->colocation_group() != nullptr) def.colocation_group = n->colocation_group()->str();
    if (assigned != nullptr && n->assigned_device() != nullptr) {
      (*assigned)[i] = n->assigned_device()->str();
    }
    auto added = graph.AddNode(std::move(def));
    if (!added.ok()) return added.status().WithPrefix(fmt::format("graph file '{}': ", source));
  }
  RETURN_IF_ERROR(graph.Validate().WithPrefix(fmt::format("graph file '{}': ", source)));
  return graph;
}

Result<std::string> GraphBytesToJson(std::string_view bytes, const std::string& source) {
  // Verified before the text generator walks the buffer.
  RETURN_IF_ERROR(VerifiedGraph(bytes, source).status());
  ASSIGN_OR_RETURN(auto parser, GraphParser());
  std::string json;
  if (!flatbuffers::GenerateText(*parser, bytes.data(), &json)) {
    return Internal("graph file '{}': cannot write JSON", source);
  }
  return json;
}

Result<std::string> GraphJsonToBytes(std::string_view json, const std::string& source) {
  ASSIGN_OR_RETURN(auto parser, GraphParser());
  std::string text(json);
  if (!parser->Parse(text.c_str())) {
    return InvalidArgument("graph file '{}' is not valid graph JSON: {}", source, parser->error_);
  }
  const auto& b = parser->builder_;
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

Status SaveGraph(const Graph& graph, const std::string& path, const SaveGraphOptions& options) {
  HugePageBufferAllocator pages;
  Builder b(InitialBufferBytes(graph), &pages);
  EncodeGraphInto(b, graph, options.assigned_devices);
  std::string_view bytes(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
  bool json = options.json || (path.size() >= 5 && path.substr(path.size() - 5) == ".json");
  if (json) {
    ASSIGN_OR_RETURN(std::string text, GraphBytesToJson(bytes, path));
    return WriteFileAtomically(path, text);
  }
  return WriteFileAtomically(path, bytes);  // straight from the builder: no copy
}

Result<Graph> LoadGraph(const std::string& path, std::vector<std::string>* assigned) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return DecodeGraph(bytes, path, assigned);
}

}  // namespace dflow::serialization
