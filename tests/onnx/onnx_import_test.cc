// The importer's errors (each names the file, and a node's name, op and opset), its external-data
// rules, and the tools taking an ONNX model as they take a graph file.
#include "onnx/onnx_import.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "onnx/onnx_headers.h"
#include "onnx/tensor_proto.h"
#include "ops/math_ops.h"
#include "ops/optimizers.h"
#include "runtime/session.h"
#include "serialization/npy.h"
#include "status_matchers.h"
#include "tools/run_tool.h"

namespace dflow::onnx {
namespace {

namespace fs = std::filesystem;
using testing::MessageHas;

const std::string kNode = "/usr/share/libonnx-testdata/data/node";

class OnnxImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kNode)) GTEST_SKIP() << kNode << " is missing (libonnx-testdata)";
  }
};

TEST_F(OnnxImportTest, AModelBecomesAGraphWithItsInputsAndOutputs) {
  auto model = ImportModel(kNode + "/test_conv_with_strides_padding/model.onnx");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->inputs, (std::vector<std::string>{"x", "W"}));  // the weights are an input here
  EXPECT_EQ(model->outputs, (std::vector<std::string>{"y:0"}));
  EXPECT_GE(model->opset, 11);
}

TEST_F(OnnxImportTest, ErrorsNameTheFileTheNodeTheOpAndTheOpset) {
  const std::string nms = kNode + "/test_nonmaxsuppression_center_point_box_format/model.onnx";
  auto refused = ImportModel(nms);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(MessageHas(refused.status(),
                         {nms, "(NonMaxSuppression, opset ", "dflow does not import this op"}))
      << refused.status().ToString();

  const std::string dir = ::testing::TempDir() + "/onnx_import_test";
  fs::create_directories(dir);
  std::ofstream(dir + "/garbage.onnx") << "this is not a model";
  auto garbage = ImportModel(dir + "/garbage.onnx");
  EXPECT_EQ(garbage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(garbage.status(), {dir + "/garbage.onnx", "not an ONNX model"}))
      << garbage.status().ToString();

  auto missing = ImportModel(dir + "/none.onnx");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  auto big = ImportModel(kNode + "/test_relu/model.onnx", {.max_model_bytes = 10});
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(big.status(), {"test_relu/model.onnx", "10 bytes allowed"}))
      << big.status().ToString();

  // A model ONNX's checker refuses: a node reading a value nothing makes.
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* node = m.mutable_graph()->add_node();
  node->set_op_type("Relu");
  node->set_name("r");
  node->add_input("nowhere");
  node->add_output("y");
  m.mutable_graph()->set_name("g");
  auto* out = m.mutable_graph()->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  auto bad = ImportModelBytes(m.SerializeAsString(), "made.onnx", dir);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(bad.status(), {"made.onnx", "ONNX's checker"})) << bad.status().ToString();
}

// Shape arithmetic as exporters write it (PyTorch's x.view(x.size(0), -1)): Shape, Gather,
// Unsqueeze and Concat into Reshape's shape input. The importer folds the nodes whose inputs are
// all known, so the Reshape gets its constant shape and the graph keeps none of that arithmetic.
TEST_F(OnnxImportTest, ShapeArithmeticIsFoldedAtImport) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("view");
  auto value_info = [](::onnx::ValueInfoProto* v, const std::string& name,
                       std::vector<int64_t> dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  value_info(g->add_input(), "x", {2, 3, 4});
  value_info(g->add_output(), "y", {2, 12});
  auto ints = [&](const std::string& name, std::vector<int64_t> v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::INT64);
    if (v.size() != 1 || name != "zero") t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  };
  ints("zero", {0});  // a scalar index
  ints("axes", {0});
  ints("minus_one", {-1});
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  node("Relu", {"x"}, "r");
  node("Shape", {"r"}, "shape");
  node("Gather", {"shape", "zero"}, "batch");
  node("Unsqueeze", {"batch", "axes"}, "batch1");
  node("Concat", {"batch1", "minus_one"}, "target")->add_attribute()->CopyFrom([] {
    ::onnx::AttributeProto a;
    a.set_name("axis");
    a.set_type(::onnx::AttributeProto::INT);
    a.set_i(0);
    return a;
  }());
  node("Reshape", {"r", "target"}, "y");
  auto model = ImportModelBytes(m.SerializeAsString(), "view.onnx", ::testing::TempDir());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::string> ops;
  for (int i = 0; i < model->graph.num_nodes(); ++i) ops.push_back(model->graph.node(i).op());
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Gather"), 0)
      << fmt::format("{}", fmt::join(ops, ","));
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Concat"), 0)
      << fmt::format("{}", fmt::join(ops, ","));
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Relu"), 1);
  std::vector<float> xv(24);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i) - 10;
  auto session = Session::Create(model->graph);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out =
      (*session)->Run({{"x", Tensor::FromVector<float>(xv, Shape{2, 3, 4})}}, model->outputs);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->at(0).shape(), Shape({2, 12}));
  std::vector<float> y = out->at(0).ToVector<float>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(y[i], std::max(xv[i], 0.0f)) << i;
}

// Folding is bounded: a constant Range of three billion elements (24 GB) is not computed at
// import; the node stays in the graph, where running it is the user's choice.
TEST_F(OnnxImportTest, FoldingAHugeConstantIsBounded) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("huge");
  auto scalar = [&](const std::string& name, int64_t v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::INT64);
    t->add_int64_data(v);
  };
  scalar("start", 0);
  scalar("limit", 3'000'000'000);
  scalar("delta", 1);
  auto* n = g->add_node();
  n->set_op_type("Range");
  n->set_name("range");
  for (const char* in : {"start", "limit", "delta"}) n->add_input(in);
  n->add_output("y");
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::INT64);
  out->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("n");
  auto model = ImportModelBytes(m.SerializeAsString(), "huge.onnx", ::testing::TempDir());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  bool kept = false;
  for (int i = 0; i < model->graph.num_nodes(); ++i) kept |= model->graph.node(i).op() == "Range";
  EXPECT_TRUE(kept);
}

// External data is read only from the model's own folder, bounded by the size the dims declare.
TEST_F(OnnxImportTest, ExternalDataStaysInTheModelsFolder) {
  const std::string dir = ::testing::TempDir() + "/onnx_external";
  fs::remove_all(dir);
  fs::create_directories(dir + "/sub");
  const float values[3] = {1, 2, 3};
  std::ofstream(dir + "/sub/w.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(values), sizeof values);
  std::ofstream(::testing::TempDir() + "/outside.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(values), sizeof values);
  fs::remove(dir + "/link.bin");
  fs::create_symlink(::testing::TempDir() + "/outside.bin", dir + "/link.bin");
  auto proto = [](const std::string& location, int64_t n) {
    ::onnx::TensorProto t;
    t.set_data_type(::onnx::TensorProto::FLOAT);
    t.add_dims(n);
    t.set_data_location(::onnx::TensorProto::EXTERNAL);
    auto* kv = t.add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    return t;
  };
  auto good = FromTensorProto(proto("sub/w.bin", 3), dir, "w");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->ToVector<float>(), (std::vector<float>{1, 2, 3}));
  for (const auto& [location, words] : std::vector<std::pair<std::string, std::string>>{
           {"../outside.bin", "leaves the model's folder"},
           {::testing::TempDir() + "/outside.bin", "is absolute"},
           {"link.bin", "leads out of the model's folder"}}) {
    auto r = FromTensorProto(proto(location, 3), dir, "w");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << location;
    EXPECT_TRUE(MessageHas(r.status(), {"w: ", words})) << r.status().ToString();
  }
  // Dims that claim 16 GiB over 4 bytes of data: refused before anything is allocated.
  ::onnx::TensorProto huge;
  huge.set_data_type(::onnx::TensorProto::DOUBLE);
  huge.add_dims(int64_t{1} << 30);
  huge.add_dims(2);
  huge.set_raw_data(std::string(4, '\0'));
  auto claimed = FromTensorProto(huge, dir, "huge");
  EXPECT_EQ(claimed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(claimed.status(), {"huge: ", "raw_data holds 4 bytes"}))
      << claimed.status().ToString();
  auto short_file = FromTensorProto(proto("sub/w.bin", 4), dir, "w");
  EXPECT_EQ(short_file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(short_file.status(), {"holds 12 bytes", "16 bytes needed"}))
      << short_file.status().ToString();
}

// x [N, 4] -> Gemm (W [4, 3], B [3]) -> BatchNormalization (scale, bias, mean, var) -> Reshape
// (an int64 shape [-1, 3]) -> y, with its initializers' values.
struct SmallModel {
  std::vector<float> w = {0.5f, -1, 0.25f, 2, 0.125f, -0.5f, 1, 0.75f, -2, 0.3f, 0.6f, -0.9f};
  std::vector<float> b = {0.1f, -0.2f, 0.3f}, scale = {1.5f, 0.5f, -1}, bias = {0, 1, -1};
  std::vector<float> mean = {0.2f, -0.1f, 0.4f}, var = {1, 4, 0.25f};
  float eps = 1e-5f;

  std::string Bytes() const {
    ::onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    g->set_name("small");
    auto io = [](::onnx::ValueInfoProto* v, const std::string& name) {
      v->set_name(name);
      auto* tt = v->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(::onnx::TensorProto::FLOAT);
      tt->mutable_shape()->add_dim()->set_dim_param("N");
    };
    io(g->add_input(), "x");
    g->mutable_input(0)
        ->mutable_type()
        ->mutable_tensor_type()
        ->mutable_shape()
        ->add_dim()
        ->set_dim_value(4);
    io(g->add_output(), "y");
    g->mutable_output(0)
        ->mutable_type()
        ->mutable_tensor_type()
        ->mutable_shape()
        ->add_dim()
        ->set_dim_value(3);
    auto floats = [&](const std::string& name, const std::vector<float>& v,
                      std::vector<int64_t> dims) {
      auto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(::onnx::TensorProto::FLOAT);
      for (int64_t d : dims) t->add_dims(d);
      for (float x : v) t->add_float_data(x);
    };
    floats("W", w, {4, 3});
    floats("B", b, {3});
    floats("scale", scale, {3});
    floats("bias", bias, {3});
    floats("mean", mean, {3});
    floats("var", var, {3});
    auto* shape = g->add_initializer();
    shape->set_name("shape");
    shape->set_data_type(::onnx::TensorProto::INT64);
    shape->add_dims(2);
    shape->add_int64_data(-1);
    shape->add_int64_data(3);
    auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
      auto* n = g->add_node();
      n->set_op_type(op);
      n->set_name(op);
      for (const auto& i : in) n->add_input(i);
      n->add_output(out);
      return n;
    };
    node("Gemm", {"x", "W", "B"}, "h");
    auto* bn = node("BatchNormalization", {"h", "scale", "bias", "mean", "var"}, "n");
    auto* a = bn->add_attribute();
    a->set_name("epsilon");
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(eps);
    node("Reshape", {"n", "shape"}, "y");
    return m.SerializeAsString();
  }
};

// With trainable initializers the float weights become Variables assigned by "init" (the
// running statistics and the integer shape stay constants), the model gives the same outputs,
// and one SGD step on sum(y) moves every parameter by the learning rate times its gradient,
// here worked out by hand in plain loops.
TEST_F(OnnxImportTest, TrainableInitializersBecomeVariablesThatTrain) {
  SmallModel sm;
  const std::string dir = ::testing::TempDir();
  auto frozen = ImportModelBytes(sm.Bytes(), "small.onnx", dir);
  ASSERT_TRUE(frozen.ok()) << frozen.status().ToString();
  EXPECT_TRUE(frozen->variables.empty());
  EXPECT_EQ(frozen->init, "");
  auto model = ImportModelBytes(sm.Bytes(), "small.onnx", dir, {.trainable_initializers = true});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->variables, (std::vector<std::string>{"W:0", "B:0", "scale:0", "bias:0"}));
  EXPECT_EQ(model->init, "init");
  EXPECT_EQ(model->assigns,
            (std::vector<std::string>{"W/init:0", "B/init:0", "scale/init:0", "bias/init:0"}));
  auto no_op = ImportModelBytes(sm.Bytes(), "small.onnx", dir,
                                {.trainable_initializers = true, .init_op = ""});
  ASSERT_TRUE(no_op.ok()) << no_op.status().ToString();
  EXPECT_EQ(no_op->init, "");
  EXPECT_FALSE(no_op->graph.FindNode("init"));
  EXPECT_EQ(no_op->assigns.size(), 4u);

  const int64_t n = 5;
  std::vector<float> xv(n * 4);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.1f * static_cast<float>(i) - 0.7f;
  const Tensor x = Tensor::FromVector<float>(xv, Shape{n, 4});
  auto reference = Session::Create(frozen->graph);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  auto expected = (*reference)->Run({{"x", x}}, frozen->outputs);
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();

  Scope root = Scope::ExtendGraph(model->graph);
  auto y = root.FindOutput(model->outputs[0]);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  auto loss = ops::ReduceSum(root.WithOpName("loss"), *y);
  std::vector<Output> vars;
  for (const auto& v : model->variables) vars.push_back(root.FindOutput(v).value());
  const float lr = 0.5f;
  ops::SGD sgd({.learning_rate = lr});
  auto step = sgd.Minimize(root.WithOpName("step"), loss, vars);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE((*session)->Run({}, {}, {model->init}).ok());
  auto before = (*session)->Run({{"x", x}}, model->outputs);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(before->at(0).ToVector<float>(), expected->at(0).ToVector<float>());
  ASSERT_TRUE((*session)->Run({{"x", x}}, {}, {step.node.node_name()}).ok());
  auto after = (*session)->Run({}, model->variables);
  ASSERT_TRUE(after.ok()) << after.status().ToString();

  // d sum(y) / d h[i][j] = s[j] = scale[j] / sqrt(var[j] + eps).
  std::vector<double> s(3), h(n * 3);
  for (int j = 0; j < 3; ++j) s[j] = sm.scale[j] / std::sqrt(double{sm.var[j]} + sm.eps);
  for (int64_t r = 0; r < n; ++r) {
    for (int j = 0; j < 3; ++j) {
      double acc = sm.b[j];
      for (int k = 0; k < 4; ++k) acc += double{xv[r * 4 + k]} * sm.w[k * 3 + j];
      h[r * 3 + j] = acc;
    }
  }
  auto near = [](const std::vector<float>& got, const std::vector<double>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << what << i;
  };
  std::vector<double> w(12), b(3), scale(3), bias(3);
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 3; ++j) {
      double g = 0;
      for (int64_t r = 0; r < n; ++r) g += xv[r * 4 + k] * s[j];
      w[k * 3 + j] = sm.w[k * 3 + j] - lr * g;
    }
  }
  for (int j = 0; j < 3; ++j) {
    double gs = 0;
    for (int64_t r = 0; r < n; ++r)
      gs += (h[r * 3 + j] - sm.mean[j]) / std::sqrt(sm.var[j] + sm.eps);
    b[j] = sm.b[j] - lr * n * s[j];
    scale[j] = sm.scale[j] - lr * gs;
    bias[j] = sm.bias[j] - lr * n;
  }
  near(after->at(0).ToVector<float>(), w, "W");
  near(after->at(1).ToVector<float>(), b, "B");
  near(after->at(2).ToVector<float>(), scale, "scale");
  near(after->at(3).ToVector<float>(), bias, "bias");
}

// dflow-run takes an ONNX model as it takes a graph file: its inputs are fed by their ONNX
// names, its outputs fetched by theirs; the answer is the ONNX test data's.
TEST_F(OnnxImportTest, DflowRunRunsAnOnnxModel) {
  const std::string dir = kNode + "/test_conv_with_strides_padding";
  auto x = ReadTensorFile(dir + "/test_data_set_0/input_0.pb");
  auto w = ReadTensorFile(dir + "/test_data_set_0/input_1.pb");
  auto y = ReadTensorFile(dir + "/test_data_set_0/output_0.pb");
  ASSERT_TRUE(x.ok() && w.ok() && y.ok());
  const std::string tmp = ::testing::TempDir();
  ASSERT_TRUE(serialization::WriteNpy(*x, tmp + "/conv_x.npy").ok());
  ASSERT_TRUE(serialization::WriteNpy(*w, tmp + "/conv_w.npy").ok());
  auto ran = testing::RunBinary(
      DFLOW_RUN_BINARY,
      std::vector<std::string>{dir + "/model.onnx", "--feed", "x=" + tmp + "/conv_x.npy", "--feed",
                               "W=" + tmp + "/conv_w.npy", "--fetch", "y=" + tmp + "/conv_y.npy"});
  ASSERT_EQ(ran.code, 0) << ran.output;
  auto got = serialization::ReadNpy(tmp + "/conv_y.npy");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->shape(), y->shape());
  std::vector<float> g = got->ToVector<float>(), e = y->ToVector<float>();
  for (size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-4f) << i;
}

// ConvTranspose with the batch known only at run time (as exporters write it): the shape of the
// convolution it transposes is assembled as the graph runs. Against a plain loop that scatters
// every input element through the kernel.
TEST_F(OnnxImportTest, ConvTransposeWithARunTimeBatchMatchesAPlainLoop) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("deconv");
  const int64_t ci = 2, co = 3, h = 3, w = 4, k = 3, stride = 2, pad = 1, out_pad = 1;
  const int64_t oh = stride * (h - 1) + out_pad + k - 2 * pad,
                ow = stride * (w - 1) + out_pad + k - 2 * pad;
  auto io = [](::onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("N");
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  io(g->add_input(), "x", {ci, h, w});
  io(g->add_output(), "y", {co, oh, ow});
  std::vector<float> wv(ci * co * k * k);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = 0.05f * static_cast<float>((i * 7) % 11) - 0.2f;
  auto* wt = g->add_initializer();
  wt->set_name("W");
  wt->set_data_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : {ci, co, k, k}) wt->add_dims(d);
  for (float v : wv) wt->add_float_data(v);
  auto* n = g->add_node();
  n->set_op_type("ConvTranspose");
  n->set_name("deconv");
  n->add_input("x");
  n->add_input("W");
  n->add_output("y");
  auto ints = [&](const std::string& name, std::vector<int64_t> v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  };
  ints("strides", {stride, stride});
  ints("pads", {pad, pad, pad, pad});
  ints("output_padding", {out_pad, out_pad});
  auto model = ImportModelBytes(m.SerializeAsString(), "deconv.onnx", ::testing::TempDir());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto session = Session::Create(model->graph);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  for (int64_t batch : {1, 3}) {
    std::vector<float> xv(batch * ci * h * w);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.1f * static_cast<float>((i * 5) % 13) - 0.6f;
    auto out = (*session)->Run({{"x", Tensor::FromVector<float>(xv, Shape{batch, ci, h, w})}},
                               model->outputs);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ(out->at(0).shape(), Shape({batch, co, oh, ow}));
    std::vector<double> want(batch * co * oh * ow, 0.0);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t c = 0; c < ci; ++c)
        for (int64_t i = 0; i < h; ++i)
          for (int64_t j = 0; j < w; ++j)
            for (int64_t o = 0; o < co; ++o)
              for (int64_t a = 0; a < k; ++a)
                for (int64_t e = 0; e < k; ++e) {
                  const int64_t y = i * stride + a - pad, x = j * stride + e - pad;
                  if (y < 0 || y >= oh || x < 0 || x >= ow) continue;
                  want[((b * co + o) * oh + y) * ow + x] +=
                      double{xv[((b * ci + c) * h + i) * w + j]} *
                      wv[((c * co + o) * k + a) * k + e];
                }
    std::vector<float> got = out->at(0).ToVector<float>();
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5) << batch << " " << i;
  }
}

// ConstantOfShape to a shape fed at run time, of each kind of value: the tensor is made as the
// graph runs (a float64 value once failed to import, its fill built from float32).
TEST_F(OnnxImportTest, ConstantOfShapeAtRunTimeKeepsTheValuesDtype) {
  for (const auto& [type, dtype] :
       std::vector<std::pair<int, DType>>{{::onnx::TensorProto::DOUBLE, DType::kF64},
                                          {::onnx::TensorProto::FLOAT, DType::kF32},
                                          {::onnx::TensorProto::INT64, DType::kI64}}) {
    ::onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    g->set_name("fill");
    auto* in = g->add_input();
    in->set_name("shape");
    in->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::INT64);
    in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
    auto* out = g->add_output();
    out->set_name("y");
    out->mutable_type()->mutable_tensor_type()->set_elem_type(type);
    for (const char* d : {"rows", "columns"}) {
      out->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param(d);
    }
    auto* n = g->add_node();
    n->set_op_type("ConstantOfShape");
    n->set_name("fill");
    n->add_input("shape");
    n->add_output("y");
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(::onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(type);
    a->mutable_t()->add_dims(1);
    if (type == ::onnx::TensorProto::DOUBLE) a->mutable_t()->add_double_data(2.5);
    if (type == ::onnx::TensorProto::FLOAT) a->mutable_t()->add_float_data(2.5f);
    if (type == ::onnx::TensorProto::INT64) a->mutable_t()->add_int64_data(7);
    auto model = ImportModelBytes(m.SerializeAsString(), "fill.onnx", ::testing::TempDir());
    ASSERT_TRUE(model.ok()) << DTypeName(dtype) << ": " << model.status().ToString();
    auto session = Session::Create(model->graph);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    auto y =
        (*session)->Run({{"shape", Tensor::FromVector<int64_t>({2, 3}, Shape{2})}}, model->outputs);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_EQ(y->at(0).dtype(), dtype);
    EXPECT_EQ(y->at(0).shape(), Shape({2, 3}));
    if (dtype == DType::kF64) {
      EXPECT_EQ(y->at(0).ToVector<double>(), std::vector<double>(6, 2.5));
    } else if (dtype == DType::kF32) {
      EXPECT_EQ(y->at(0).ToVector<float>(), std::vector<float>(6, 2.5f));
    } else if (dtype == DType::kI64) {
      EXPECT_EQ(y->at(0).ToVector<int64_t>(), std::vector<int64_t>(6, 7));
    }
  }
}

}  // namespace
}  // namespace dflow::onnx
