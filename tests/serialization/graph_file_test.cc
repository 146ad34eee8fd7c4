// Graph files: exact round trips (FlatBuffers and JSON) for every attribute type and dtype, a
// real training graph that computes the same after a round trip, and damaged files.
#include "serialization/graph_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/register.h"
#include "runtime/session.h"
#include "serialization/file_util.h"
#include "serialization/schema/graph_generated.h"
#include "test_util.h"

namespace dflow::serialization {
namespace {

using testing::MessageHas;

// An op taking an attribute of every type (never run).
void RegisterAllAttrsOp() {
  static std::once_flag once;
  std::call_once(once, [] {
    ops::RegisterStandardOps();
    std::vector<AttrDef> attrs;
    const char* names[] = {"i",  "f",  "b",  "s",  "d",  "sh",  "t",
                           "li", "lf", "lb", "ls", "ld", "lsh", "lt"};
    for (int k = 0; k <= static_cast<int>(AttrType::kTensorList); ++k) {
      attrs.push_back({names[k], static_cast<AttrType>(k), std::nullopt});
    }
    Status s = OpRegistry::Global().Register({.name = "TestAllAttrs",
                                              .outputs = {{.name = "y", .fixed = DType::kF32}},
                                              .attrs = attrs,
                                              .shape_fn = [](InferenceContext& c) {
                                                c.set_output(0, Shape{});
                                                return Status::OK();
                                              }});
    ASSERT_TRUE(s.ok()) << s.ToString();
  });
}

// A tensor of `dtype` with distinct bytes.
Tensor Filled(DType dtype, const Shape& shape, uint8_t seed) {
  Tensor t(dtype, shape);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.num_bytes(); ++i) p[i] = static_cast<uint8_t>(seed + 7 * i);
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < t.num_bytes(); ++i) p[i] &= 1;
  }
  return t;
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

// `digits`: significant digits floats keep (0: exact). FlatBuffers' JSON printer writes 12.
bool SameFloat(double a, double b, int digits) {
  if (digits == 0) return a == b || (a != a && b != b);
  return std::abs(a - b) <= std::abs(a) * std::pow(10.0, 1 - digits);
}

bool SameAttr(const AttrValue& a, const AttrValue& b, int digits) {
  if (a.index() != b.index()) return false;
  if (TypeOf(a) == AttrType::kTensor) return SameTensor(std::get<Tensor>(a), std::get<Tensor>(b));
  if (TypeOf(a) == AttrType::kTensorList) {
    const auto& x = std::get<std::vector<Tensor>>(a);
    const auto& y = std::get<std::vector<Tensor>>(b);
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!SameTensor(x[i], y[i])) return false;
    }
    return true;
  }
  if (TypeOf(a) == AttrType::kFloat) {
    return SameFloat(std::get<double>(a), std::get<double>(b), digits);
  }
  if (TypeOf(a) == AttrType::kFloatList) {
    const auto& x = std::get<std::vector<double>>(a);
    const auto& y = std::get<std::vector<double>>(b);
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!SameFloat(x[i], y[i], digits)) return false;
    }
    return true;
  }
  return AttrValueString(a) == AttrValueString(b);
}

void ExpectSameGraph(const Graph& a, const Graph& b, int digits = 0) {
  ASSERT_EQ(a.num_nodes(), b.num_nodes());
  for (int id = 0; id < a.num_nodes(); ++id) {
    const NodeDef& x = a.node(id).def();
    const NodeDef& y = b.node(id).def();
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.op, y.op) << x.name;
    EXPECT_EQ(x.inputs, y.inputs) << x.name;
    EXPECT_EQ(x.control_inputs, y.control_inputs) << x.name;
    EXPECT_EQ(x.device, y.device) << x.name;
    EXPECT_EQ(x.colocation_group, y.colocation_group) << x.name;
    ASSERT_EQ(x.attrs.size(), y.attrs.size()) << x.name;
    for (auto it = x.attrs.begin(), jt = y.attrs.begin(); it != x.attrs.end(); ++it, ++jt) {
      EXPECT_EQ(it->first, jt->first) << x.name;
      EXPECT_TRUE(SameAttr(it->second, jt->second, digits))
          << x.name << "." << it->first << ": " << AttrValueString(it->second) << " vs "
          << AttrValueString(jt->second);
    }
  }
}

Graph AllAttrsGraph() {
  RegisterAllAttrsOp();
  Graph g;
  std::vector<DType> dtypes = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                               DType::kI32, DType::kI64, DType::kU8,  DType::kBool};
  std::vector<Tensor> tensors;
  for (size_t k = 0; k < dtypes.size(); ++k) {
    tensors.push_back(Filled(dtypes[k], Shape{2, 3}, static_cast<uint8_t>(k)));
  }
  for (size_t k = 0; k < dtypes.size(); ++k) {
    NodeDef d{.name = "all" + std::to_string(k), .op = "TestAllAttrs"};
    d.attrs = {{"i", int64_t{-5} - static_cast<int64_t>(k)},
               {"f", 1.0 / 3 + static_cast<double>(k)},
               {"b", k % 2 == 0},
               {"s", std::string("text \"quoted\" ü ") + std::to_string(k)},
               {"d", dtypes[k]},
               {"sh", k == 0 ? Shape::Unknown() : Shape{-1, 3, static_cast<int64_t>(k)}},
               {"t", tensors[k]},
               {"li", std::vector<int64_t>{1, -2, int64_t{1} << 40}},
               {"lf", std::vector<double>{0.5, -1e300, 3.25}},
               {"lb", std::vector<bool>{true, false, true}},
               {"ls", std::vector<std::string>{"a", "", "c"}},
               {"ld", dtypes},
               {"lsh", std::vector<Shape>{Shape{}, Shape{4}, Shape::Unknown()}},
               {"lt", tensors}};
    if (k == 1) d.device = "cpu:1";
    if (k == 2) d.colocation_group = "group";
    if (k > 0) d.control_inputs = {"all" + std::to_string(k - 1)};
    EXPECT_TRUE(g.AddNode(std::move(d)).ok());
  }
  Status s = g.Validate();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return g;
}

TEST(GraphFileTest, EveryAttributeTypeAndDTypeRoundTripsExactly) {
  Graph g = AllAttrsGraph();
  std::string dir = ::testing::TempDir();
  for (const char* file : {"all.dfg", "all.json"}) {
    std::string path = dir + "/" + file;
    std::vector<std::string> assigned(g.num_nodes(), "");
    assigned[3] = "/job:localhost/task:0/device:CPU:1";
    ASSERT_TRUE(SaveGraph(g, path, {.assigned_devices = assigned}).ok());
    std::vector<std::string> read_assigned;
    auto loaded = LoadGraph(path, &read_assigned);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    // Exact, except that the JSON form keeps 12 significant digits of float attributes.
    ExpectSameGraph(g, *loaded, std::string(file).ends_with(".json") ? 12 : 0);
    EXPECT_EQ(read_assigned, assigned);
  }
  // The JSON form is text a person can read.
  auto text = ReadFile(dir + "/all.json");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->front(), '{');
  EXPECT_NE(text->find("\"op\": \"TestAllAttrs\""), std::string::npos);
  EXPECT_NE(text->find("\"type\": \"TENSOR_LIST\""), std::string::npos);
  // Saving is deterministic.
  EXPECT_EQ(EncodeGraph(g), EncodeGraph(*DecodeGraph(EncodeGraph(g), "memory")));
}

// A small MLP trained with SGD: a real graph with variables, gradients and updates.
struct Mlp {
  Scope root = Scope::NewRootScope();
  std::vector<std::string> init;
  std::string loss, step;
  Mlp() {
    auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 6});
    auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    std::vector<Output> vars;
    Output h = x;
    int64_t sizes[] = {6, 8, 3};
    for (int l = 0; l < 2; ++l) {
      auto w = ops::InitializedVariable(root.WithOpName("w" + std::to_string(l)),
                                        Shape{sizes[l], sizes[l + 1]},
                                        ops::Initializer::GlorotUniform(l + 1));
      init.push_back(w.init.node_name());
      vars.push_back(w.var);
      h = ops::MatMul(root, h, w.var);
      if (l == 0) h = ops::Relu(root, h);
    }
    auto l = ops::ReduceMean(root.WithOpName("loss"),
                             ops::SparseSoftmaxCrossEntropyWithLogits(root, h, labels).loss);
    loss = l.name();
    ops::SGD sgd({.learning_rate = 0.3});
    step = sgd.Minimize(root, l, vars).name();
  }
};

std::vector<float> Train(Result<std::unique_ptr<Session>> created, const Mlp& m) {
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  if (!created.ok()) return {};
  Session* session = created->get();
  EXPECT_TRUE(session->Run({}, {}, m.init).ok());
  std::vector<float> losses;
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> lv(5);
    for (int i = 0; i < 5; ++i) lv[i] = (i + s) % 3;
    auto out =
        session->Run({{"x", Tensor::FromVector(testing::RandomFloats(30, s, -1, 1), Shape{5, 6})},
                      {"labels", Tensor::FromVector(lv, Shape{5})}},
                     {m.loss}, {m.step});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (out.ok()) losses.push_back(out->at(0).data<float>()[0]);
  }
  return losses;
}

TEST(GraphFileTest, ATrainingGraphComputesTheSameAfterARoundTrip) {
  Mlp m;
  ASSERT_TRUE(m.root.ok());
  std::string path = ::testing::TempDir() + "/mlp.dfg";
  Graph g = m.root.graph();
  ASSERT_TRUE(g.Validate().ok());
  ASSERT_TRUE(SaveGraph(g, path).ok());
  auto loaded = LoadGraph(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ExpectSameGraph(g, *loaded);
  auto direct = Train(Session::Create(m.root), m);
  auto from_file = Train(Session::Create(std::move(*loaded)), m);
  ASSERT_EQ(direct.size(), 4u);
  EXPECT_EQ(direct, from_file);  // bit for bit
  EXPECT_LT(direct.back(), direct.front());
}

// Every damaged file is refused with InvalidArgument naming the file, or (when the damage hit
// only values) loads as a valid graph: never a crash, a hang or a huge allocation.
TEST(GraphFileTest, DamagedFilesAreRefusedByName) {
  Mlp m;
  Graph g = m.root.graph();
  ASSERT_TRUE(g.Validate().ok());
  std::string good = EncodeGraph(g);
  auto expect_refused_or_valid = [](std::string_view bytes, const char* what) {
    auto r = DecodeGraph(bytes, "damaged.dfg");
    if (r.ok()) return;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << what;
    EXPECT_TRUE(MessageHas(r.status(), {"'damaged.dfg'"})) << what << ": " << r.status().ToString();
  };
  // Truncated at many lengths: always refused.
  for (size_t n = 0; n < good.size(); n += 1 + good.size() / 300) {
    auto r = DecodeGraph(std::string_view(good).substr(0, n), "damaged.dfg");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << n;
  }
  // Random bytes overwritten.
  std::mt19937 gen(11);
  for (int round = 0; round < 400; ++round) {
    std::string bad = good;
    for (int k = 0; k < 1 + round % 4; ++k) bad[gen() % bad.size()] = static_cast<char>(gen());
    expect_refused_or_valid(bad, "corrupted");
  }
  // Garbage and a wrong identifier.
  auto r = DecodeGraph("not a graph at all", "damaged.dfg");
  EXPECT_TRUE(MessageHas(r.status(), {"'damaged.dfg'", "DFG1"}));

  // Hostile content, built with the FlatBuffers API: a tensor declaring 2^40 elements with 4
  // bytes of data, an unknown dtype, a newer version, an unknown op, a cycle.
  auto build = [](auto fill, uint32_t version = kGraphFormatVersion) {
    flatbuffers::FlatBufferBuilder b;
    std::vector<flatbuffers::Offset<fb::Node>> nodes = fill(b);
    b.Finish(fb::CreateGraph(b, version, b.CreateVector(nodes)), fb::GraphIdentifier());
    return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
  };
  auto const_node = [](flatbuffers::FlatBufferBuilder& b, const char* name, fb::DType dtype,
                       std::vector<int64_t> dims, size_t data_bytes) {
    std::vector<uint8_t> data(data_bytes, 0);
    auto tensor =
        fb::CreateTensor(b, dtype, fb::CreateShape(b, b.CreateVector(dims)), b.CreateVector(data));
    auto value = fb::CreateAttr(b, b.CreateString("value"), fb::AttrType::TENSOR, 0, 0, false, 0,
                                fb::DType::INVALID, 0, tensor);
    auto dt = fb::CreateAttr(b, b.CreateString("dtype"), fb::AttrType::DTYPE, 0, 0, false, 0,
                             fb::DType::F32);
    std::vector<flatbuffers::Offset<fb::Attr>> attrs = {dt, value};
    return fb::CreateNode(b, b.CreateString(name), b.CreateString("Const"), 0, 0,
                          b.CreateVector(attrs));
  };
  struct Case {
    std::string bytes;
    std::vector<std::string> words;
  };
  std::vector<Case> cases;
  cases.push_back(
      {build([&](auto& b) {
         return std::vector{const_node(b, "huge", fb::DType::F32, {1 << 20, 1 << 20}, 4)};
       }),
       {"'huge'", "needs 4398046511104 bytes", "has 4"}});
  cases.push_back(
      {build([&](auto& b) {
         return std::vector{const_node(b, "overflow", fb::DType::F32, {1LL << 40, 1LL << 40}, 4)};
       }),
       {"'overflow'", "too large"}});
  cases.push_back({build([&](auto& b) {
                     return std::vector{const_node(b, "odd", static_cast<fb::DType>(200), {1}, 4)};
                   }),
                   {"'odd'", "unknown dtype 200"}});
  cases.push_back(
      {build([&](auto& b) {
         return std::vector{const_node(b, "rank", fb::DType::F32, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 4)};
       }),
       {"'rank'"}});
  cases.push_back(
      {build([&](auto& b) { return std::vector{const_node(b, "c", fb::DType::F32, {1}, 4)}; },
             kGraphFormatVersion + 1),
       {"format version 2"}});
  cases.push_back({build([&](auto& b) {
                     return std::vector{
                         fb::CreateNode(b, b.CreateString("mystery"), b.CreateString("NoSuchOp"))};
                   }),
                   {"'mystery'", "unknown op 'NoSuchOp'"}});
  cases.push_back({build([&](auto& b) {
                     auto in_a = b.CreateVectorOfStrings({"b"});
                     auto in_b = b.CreateVectorOfStrings({"a"});
                     return std::vector{
                         fb::CreateNode(b, b.CreateString("a"), b.CreateString("Identity"), in_a),
                         fb::CreateNode(b, b.CreateString("b"), b.CreateString("Identity"), in_b)};
                   }),
                   {"cycle", "'a'", "'b'"}});
  cases.push_back({build([&](auto& b) {
                     auto in = b.CreateVectorOfStrings({"x:notanumber"});
                     return std::vector{
                         fb::CreateNode(b, b.CreateString("n"), b.CreateString("Identity"), in)};
                   }),
                   {"'n'", "malformed"}});
  for (const Case& c : cases) {
    auto loaded = DecodeGraph(c.bytes, "hostile.dfg");
    EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument) << c.words[0];
    std::vector<std::string> words = c.words;
    words.push_back("'hostile.dfg'");
    EXPECT_TRUE(MessageHas(loaded.status(), words)) << loaded.status().ToString();
  }

  // Files: missing, and JSON that does not parse.
  auto missing = LoadGraph(::testing::TempDir() + "/no_such_graph.dfg");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(missing.status(), {"no_such_graph.dfg"}));
  std::string bad_json = ::testing::TempDir() + "/bad.json";
  std::ofstream(bad_json) << "{ \"version\": 1, \"nodes\": [ { \"name\": \"x\" ";
  auto j = LoadGraph(bad_json);
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(j.status(), {"bad.json"}));
}

TEST(GraphFileTest, EditedJsonLoadsAndTheEditTakesEffect) {
  Scope root = Scope::NewRootScope();
  ops::Add(root.WithOpName("y"), ops::Const(root.WithOpName("a"), 2.0f),
           ops::Const(root.WithOpName("b"), 3.0f));
  Graph g = root.graph();
  ASSERT_TRUE(g.Validate().ok());
  std::string path = ::testing::TempDir() + "/edit.json";
  ASSERT_TRUE(SaveGraph(g, path).ok());
  std::string text = *ReadFile(path);
  // Rename the op of y: Add becomes Mul.
  size_t at = text.find("\"op\": \"Add\"");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 11, "\"op\": \"Mul\"");
  ASSERT_TRUE(WriteFileAtomically(path, text).ok());
  auto loaded = LoadGraph(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto session = Session::Create(std::move(*loaded));
  ASSERT_TRUE(session.ok());
  auto out = (*session)->Run({}, {"y"});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->at(0).data<float>()[0], 6.0f);
}

}  // namespace
}  // namespace dflow::serialization
