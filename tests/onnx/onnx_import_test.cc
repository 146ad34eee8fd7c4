// The importer's errors (each names the file, and a node's name, op and opset), its external-data
// rules, and the tools taking an ONNX model as they take a graph file.
#include "onnx/onnx_import.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "onnx/onnx_headers.h"
#include "onnx/tensor_proto.h"
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

}  // namespace
}  // namespace dflow::onnx
