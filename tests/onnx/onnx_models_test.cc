// Real models from outside: ResNet-50, MobileNetV2 (torchvision) and a BERT-base-shaped encoder,
// exported from PyTorch at opset 17 with dynamic batch (and sequence) dimensions by
// bench/peers/export_models_onnx.py, imported by dflow and run on the same inputs as ONNX
// Runtime (npm onnxruntime-node, run by bench/peers/ort_models.mjs): dflow's outputs must equal
// ORT's within 1e-4 of the output's largest magnitude.
//
// Needs /usr/bin/python3 with torch and torchvision, node, and onnxruntime-node under
// $DFLOW_ORT_DIR (default /opt/dflow-peers/ort): scripts/setup.sh installs them. Without them the
// test fails saying so, unless DFLOW_SKIP_PEER_TESTS=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "onnx/onnx_import.h"
#include "runtime/session.h"
#include "serialization/npy.h"
#include "tools/run_tool.h"

namespace dflow::onnx {
namespace {

namespace fs = std::filesystem;
using dflow::testing::RunBinary;

const std::string kPython = "/usr/bin/python3";
const std::string kScripts = std::string(DFLOW_SOURCE_DIR) + "/bench/peers";

std::string OrtDir() {
  const char* dir = std::getenv("DFLOW_ORT_DIR");
  return dir != nullptr ? dir : "/opt/dflow-peers/ort";
}

class OnnxModelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string missing;
    if (RunBinary(kPython, std::vector<std::string>{"-c", "import torch, torchvision"}).code != 0) {
      missing = kPython + " with torch and torchvision (python3-torch, python3-torchvision)";
    } else if (RunBinary("/usr/bin/env", std::vector<std::string>{"node", "--version"}).code != 0) {
      missing = "node (nodejs)";
    } else if (!fs::exists(OrtDir() + "/node_modules/onnxruntime-node")) {
      missing = "onnxruntime-node under " + OrtDir();
    }
    if (missing.empty()) return;
    const char* skip = std::getenv("DFLOW_SKIP_PEER_TESTS");
    if (skip != nullptr && std::string(skip) == "1") GTEST_SKIP() << missing << " is missing";
    FAIL() << missing << " is missing: run scripts/setup.sh (or set DFLOW_SKIP_PEER_TESTS=1)";
  }
};

struct Model {
  std::string name;
  std::vector<std::string> inputs;
};

TEST_F(OnnxModelsTest, ImportedModelsGiveOnnxRuntimesOutputs) {
  const std::string dir = ::testing::TempDir() + "/onnx_models";
  fs::remove_all(dir);
  auto exported = RunBinary(kPython, std::vector<std::string>{kScripts + "/export_models_onnx.py",
                                                              dir, "--batch", "2", "--seq", "16"});
  ASSERT_EQ(exported.code, 0) << exported.output;
  setenv("DFLOW_ORT_DIR", OrtDir().c_str(), 1);
  for (const Model& m : {Model{"resnet50", {"x"}}, Model{"mobilenet_v2", {"x"}},
                         Model{"encoder", {"ids", "mask"}}}) {
    SCOPED_TRACE(m.name);
    const std::string model = dir + "/" + m.name + ".onnx";
    std::vector<std::string> args = {kScripts + "/ort_models.mjs", model,
                                     dir + "/" + m.name + ".ort.npy", "1"};
    Session::Feeds feeds;
    for (const std::string& in : m.inputs) {
      const std::string file = dir + "/" + m.name + "." + in + ".npy";
      args.push_back(in + "=" + file);
      auto t = serialization::ReadNpy(file);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      feeds.emplace_back(in, std::move(*t));
    }
    args.insert(args.begin(), "node");
    auto ort = RunBinary("/usr/bin/env", args);
    ASSERT_EQ(ort.code, 0) << ort.output;
    auto want = serialization::ReadNpy(dir + "/" + m.name + ".ort.npy");
    ASSERT_TRUE(want.ok()) << want.status().ToString();

    auto imported = ImportModel(model);
    ASSERT_TRUE(imported.ok()) << imported.status().ToString();
    auto session = Session::Create(imported->graph);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    auto got = (*session)->Run(feeds, imported->outputs);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->at(0).shape(), want->shape());
    std::vector<float> g = got->at(0).ToVector<float>(), w = want->ToVector<float>();
    float scale = 0;
    for (float v : w) scale = std::max(scale, std::fabs(v));
    ASSERT_GT(scale, 1e-3f) << "ONNX Runtime's output is about zero: nothing to compare";
    float worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]));
    EXPECT_LE(worst, 1e-4f * scale)
        << "largest difference " << worst << " at output scale " << scale;
    std::printf("%s: %s, largest difference from ONNX Runtime %.3g (%.2g of the output's scale)\n",
                m.name.c_str(), fmt::format("{}", got->at(0).shape()).c_str(), worst,
                worst / scale);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dflow::onnx
