// Export to ONNX: what is written (ONNX's checker accepts it; importing it back gives the graph's
// outputs), what is refused (naming the node and its op, or the missing output), and dflow-run's
// --export-onnx and --save-graph. The exported models against ONNX Runtime are in
// onnx_models_test.cc.
#include "onnx/onnx_export.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "onnx/onnx_headers.h"
#include "onnx/onnx_import.h"
#include "ops/array_ops.h"
#include "ops/conv_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "serialization/npy.h"
#include "status_matchers.h"
#include "tools/run_tool.h"

namespace dflow::onnx {
namespace {

using testing::MessageHas;

Tensor Ramp(const Shape& shape, float scale, float offset) {
  std::vector<float> v(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = scale * static_cast<float>((i * 7919) % 23) + offset;
  }
  return Tensor::FromVector<float>(v, shape);
}

// A small CNN with every kind of node the exporter writes for the examples (a placeholder with a
// free batch, constants, a variable, Conv2D, Add, Relu, MaxPool, Reshape, MatMul with a
// transposed operand, BiasAdd, Concat, Transpose, Softmax, Identity) exported, checked and
// imported back: the same outputs.
TEST(OnnxExportTest, AnExportedGraphGivesTheSameOutputs) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 1, 6, 6});
  auto w = ops::Const(root.WithOpName("w"), Ramp(Shape{4, 1, 3, 3}, 0.1f, -1));
  auto b = ops::Variable(root.WithOpName("b"), Shape{1, 4, 1, 1});
  auto init =
      ops::Assign(root.WithOpName("b_init"), b, ops::Const(root, Ramp({1, 4, 1, 1}, 0.2f, -0.5f)));
  auto conv = ops::Add(root, ops::Conv2D(root, x, w, {.pads = {1, 1, 1, 1}}), b);
  auto pooled = ops::MaxPool(root, ops::Relu(root, conv));  // [N, 4, 3, 3]
  auto flat = ops::Reshape(root, pooled, {-1, 36});
  auto m = ops::Const(root.WithOpName("m"), Ramp(Shape{10, 36}, 0.05f, -0.3f));
  auto dense = ops::BiasAdd(root, ops::MatMul(root, flat, m, {.transpose_b = true}),
                            ops::Const(root, Ramp(Shape{10}, 0.1f, 0)));
  auto both = ops::Concat(root, {dense, ops::Neg(root, dense)}, 1);  // [N, 20]
  auto t = ops::Transpose(root, ops::Transpose(root, both, {1, 0}), {1, 0});
  ops::Identity(root.WithOpName("probs"), ops::Softmax(root, t));
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE((*session)->Run({}, {}, {init.node_name()}).ok());
  const Tensor images = Ramp(Shape{3, 1, 6, 6}, 0.15f, -1.2f);
  auto want = (*session)->Run({{"x", images}}, {"probs:0", dense.name()});
  ASSERT_TRUE(want.ok()) << want.status().ToString();

  const std::string path = ::testing::TempDir() + "/exported_cnn.onnx";
  Status exported = ExportModel(**session, {"probs", dense.name()}, path);
  ASSERT_TRUE(exported.ok()) << exported.ToString();
  ::onnx::ModelProto model;
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(model.ParseFromIstream(&in));
  EXPECT_NO_THROW(::onnx::checker::check_model(model));
  ASSERT_EQ(model.graph().input_size(), 1);
  EXPECT_EQ(model.graph().input(0).name(), "x");
  EXPECT_EQ(model.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "N");
  ASSERT_EQ(model.graph().output_size(), 2);
  EXPECT_EQ(model.graph().output(0).name(), "probs");

  auto back = ImportModel(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  auto again = Session::Create(back->graph);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto got = (*again)->Run({{"x", images}}, back->outputs);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (int o = 0; o < 2; ++o) {
    ASSERT_EQ(got->at(o).shape(), want->at(o).shape()) << o;
    std::vector<float> g = got->at(o).ToVector<float>(), e = want->at(o).ToVector<float>();
    for (size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-5f) << o << " " << i;
  }
}

TEST(OnnxExportTest, WhatCannotBeExportedIsRefusedByName) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 3});
  auto sum = ops::CumSum(root.WithOpName("running"), x, ops::Const(root, int32_t{1}));
  auto v = ops::Variable(root.WithOpName("v"), Shape{3});
  auto uses_v = ops::Add(root.WithOpName("plus_v"), x, v);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  const std::string path = ::testing::TempDir() + "/refused.onnx";

  Status op = ExportModel(**session, {sum.name()}, path);
  EXPECT_EQ(op.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(op, {"node 'running' (CumSum)", "no ONNX form"})) << op.ToString();
  Status missing = ExportModel(**session, {"nowhere:0"}, path);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(missing, {"no node 'nowhere'"})) << missing.ToString();
  // A variable never assigned has no value to write.
  Status unset = ExportModel(**session, {uses_v.name()}, path);
  EXPECT_FALSE(unset.ok());
  EXPECT_TRUE(MessageHas(unset, {"node 'v' (Variable)", "reading its value"})) << unset.ToString();
  Status none = ExportModel(**session, {}, path);
  EXPECT_EQ(none.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
  Status unwritable = ExportModel(**session, {"x"}, "/nonexistent-dir/m.onnx");
  EXPECT_FALSE(unwritable.ok());
  EXPECT_TRUE(MessageHas(unwritable, {"/nonexistent-dir/m.onnx"})) << unwritable.ToString();
}

// dflow-run converts an ONNX model to a .dfg file (--save-graph) and writes a graph's part back
// as ONNX (--export-onnx); the converted graph and the re-exported model give the model's output.
TEST(OnnxExportTest, DflowRunConvertsAndExports) {
  const std::string node = "/usr/share/libonnx-testdata/data/node/test_conv_with_strides_padding";
  if (!std::filesystem::exists(node)) GTEST_SKIP() << node << " is missing (libonnx-testdata)";
  const std::string tmp = ::testing::TempDir() + "/dflow_run_export";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  auto x = ReadTensorFile(node + "/test_data_set_0/input_0.pb");
  auto w = ReadTensorFile(node + "/test_data_set_0/input_1.pb");
  auto y = ReadTensorFile(node + "/test_data_set_0/output_0.pb");
  ASSERT_TRUE(x.ok() && w.ok() && y.ok());
  ASSERT_TRUE(serialization::WriteNpy(*x, tmp + "/x.npy").ok());
  ASSERT_TRUE(serialization::WriteNpy(*w, tmp + "/w.npy").ok());
  using dflow::testing::RunBinary;
  auto saved =
      RunBinary(DFLOW_RUN_BINARY,
                std::vector<std::string>{node + "/model.onnx", "--save-graph", tmp + "/conv.dfg"});
  ASSERT_EQ(saved.code, 0) << saved.output;
  EXPECT_NE(saved.output.find("wrote " + tmp + "/conv.dfg"), std::string::npos) << saved.output;
  auto ran = RunBinary(DFLOW_RUN_BINARY,
                       std::vector<std::string>{tmp + "/conv.dfg", "--feed", "x=" + tmp + "/x.npy",
                                                "--feed", "W=" + tmp + "/w.npy", "--fetch", "y",
                                                "--export-onnx", tmp + "/back.onnx"});
  ASSERT_EQ(ran.code, 0) << ran.output;
  auto back = ImportModel(tmp + "/back.onnx");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  auto session = Session::Create(back->graph);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto got = (*session)->Run({{"x", *x}, {"W", *w}}, back->outputs);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<float> g = got->at(0).ToVector<float>(), e = y->ToVector<float>();
  ASSERT_EQ(g.size(), e.size());
  for (size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-4f) << i;

  auto no_fetch =
      RunBinary(DFLOW_RUN_BINARY, std::vector<std::string>{tmp + "/conv.dfg", "--target", "y",
                                                           "--export-onnx", tmp + "/none.onnx"});
  EXPECT_EQ(no_fetch.code, 2) << no_fetch.output;
  EXPECT_NE(no_fetch.output.find("--export-onnx needs --fetch"), std::string::npos)
      << no_fetch.output;
}

}  // namespace
}  // namespace dflow::onnx
