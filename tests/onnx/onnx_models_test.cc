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
#include <fstream>

#include "onnx/onnx_import.h"
#include "runtime/session.h"
#ifdef DFLOW_WITH_DISTRIBUTED
#include "distributed/distributed_session.h"
#include "distributed/local_worker.h"
#endif
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

// The largest difference between two outputs of the same shape, over the largest magnitude.
double RelativeDifference(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e9;
  std::vector<float> g = got.ToVector<float>(), w = want.ToVector<float>();
  double scale = 1e-30, worst = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    scale = std::max(scale, double{std::fabs(w[i])});
    worst = std::max(worst, double{std::fabs(g[i] - w[i])});
  }
  return worst / scale;
}

#if defined(DFLOW_MLP_EXAMPLE) && defined(DFLOW_CNN_EXAMPLE)
// The examples' MLP and CNN, trained (shortly) and exported with --export-onnx: ONNX's checker
// accepts each file (importing it runs the checker), and ONNX Runtime gives dflow's logits on the
// first 100 test images within 1e-5 of their largest magnitude.
TEST_F(OnnxModelsTest, TrainedExamplesExportedToOnnxGiveDflowsOutputsInOnnxRuntime) {
  const std::string dir = ::testing::TempDir() + "/onnx_exported_examples";
  fs::remove_all(dir);
  fs::create_directories(dir);
  setenv("DFLOW_ORT_DIR", OrtDir().c_str(), 1);
  for (const auto& [name, binary] : {std::pair<std::string, std::string>{"mlp", DFLOW_MLP_EXAMPLE},
                                     {"cnn", DFLOW_CNN_EXAMPLE}}) {
    SCOPED_TRACE(name);
    const std::string model = dir + "/" + name + ".onnx";
    auto trained = RunBinary(binary, std::vector<std::string>{"--epochs", "1", "--steps-per-epoch",
                                                              "10", "--export-onnx", model});
    ASSERT_EQ(trained.code, 0) << trained.output;
    ASSERT_TRUE(ImportModel(model).ok()) << ImportModel(model).status().ToString();
    auto ort =
        RunBinary("/usr/bin/env", std::vector<std::string>{"node", kScripts + "/ort_models.mjs",
                                                           model, dir + "/" + name + ".ort.npy",
                                                           "1", "x=" + model + ".images.npy"});
    ASSERT_EQ(ort.code, 0) << ort.output;
    auto want = serialization::ReadNpy(model + ".logits.npy");
    auto got = serialization::ReadNpy(dir + "/" + name + ".ort.npy");
    ASSERT_TRUE(want.ok() && got.ok());
    ASSERT_EQ(want->shape(), Shape({100, 10}));
    const double diff = RelativeDifference(*got, *want);
    EXPECT_LE(diff, 1e-5);
    std::printf("%s exported after training: ONNX Runtime's logits within %.2g of dflow's scale\n",
                name.c_str(), diff);
  }
  fs::remove_all(dir);
}
#endif

// The imported ResNet-50 (98 MiB of weights) on two devices whose 80 MiB each hold it only
// together: one such device is refused, naming it; two split it (each holds weights, tensors
// cross between them) and give the one device's outputs; so do two dflow-worker processes of
// 80 MiB; and dflow-dot draws that placement.
TEST_F(OnnxModelsTest, ImportedResNet50SplitsOverTwoMemoryLimitedDevicesAndWorkers) {
  const std::string dir = ::testing::TempDir() + "/onnx_resnet50_split";
  fs::remove_all(dir);
  auto exported =
      RunBinary(kPython, std::vector<std::string>{kScripts + "/export_models_onnx.py", dir,
                                                  "--models", "resnet50", "--batch", "2"});
  ASSERT_EQ(exported.code, 0) << exported.output;
  const std::string model = dir + "/resnet50.onnx";
  auto imported = ImportModel(model);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  auto x = serialization::ReadNpy(dir + "/resnet50.x.npy");
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  const Session::Feeds feeds = {{"x", *x}};
  auto one = Session::Create(imported->graph);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  auto want = (*one)->Run(feeds, imported->outputs);
  ASSERT_TRUE(want.ok()) << want.status().ToString();

  constexpr double kLimit = 80 << 20;
  SessionOptions options;
  options.device_memory_bytes = kLimit;
  options.calibrate_devices = false;  // the same placement on every machine
  options.placer.costs.unknown_dim = 2;
  options.devices = {"cpu:0"};
  auto alone = Session::Create(imported->graph, options);
  EXPECT_EQ(alone.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(alone.status().message().find("cpu:0"), std::string::npos) << alone.status().ToString();

  // Placed on the devices of `session`: every device holds weights, and tensors cross.
  auto check_split = [&](Session& session, const char* what) {
    const PlacementReport& p = session.placement();
    ASSERT_EQ(p.persistent_bytes.size(), 2u) << what;
    for (double bytes : p.persistent_bytes) {
      EXPECT_GT(bytes, 8 << 20) << what << "\n" << p.Summary(session.device_set());
      EXPECT_LE(bytes, kLimit) << what;
    }
    EXPECT_GT(p.cross_edges, 0) << what;
    auto got = session.Run(feeds, imported->outputs);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().ToString();
    EXPECT_LE(RelativeDifference(got->at(0), want->at(0)), 1e-5) << what;
    std::printf("%s:\n%s\n", what, p.Summary(session.device_set()).c_str());
  };
  options.devices = {"cpu:0", "cpu:1"};
  auto two = Session::Create(imported->graph, options);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  check_split(**two, "two devices of 80 MiB");

#ifdef DFLOW_WITH_DISTRIBUTED
  {
    const std::string token = "onnx-models-test";
    auto token_file = distributed::WriteTokenFile(dir, token);
    ASSERT_TRUE(token_file.ok()) << token_file.status().ToString();
    std::vector<std::unique_ptr<distributed::LocalWorker>> workers;
    distributed::DistributedOptions cluster{.token = token};
    for (int i = 0; i < 2; ++i) {
      auto w = distributed::LocalWorker::Start(
          DFLOW_WORKER_BINARY, {"--token-file", *token_file, "--memory-limit", "80MiB", "--threads",
                                "1", "--fixed-costs", "--release-after", "300"});
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      cluster.cluster.jobs["worker"].push_back((*w)->address());
      workers.push_back(std::move(w).value());
    }
    SessionOptions distributed_options;
    distributed_options.device_memory_bytes = kLimit;
    distributed_options.placer.costs.unknown_dim = 2;
    auto session =
        distributed::DistributedSession::Create(imported->graph, distributed_options, cluster);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    check_split(**session, "two dflow-worker processes of 80 MiB");
  }
#endif

  auto dot = RunBinary(DFLOW_DOT_BINARY,
                       std::vector<std::string>{model, "--devices", "cpu:0,cpu:1", "--memory-limit",
                                                "80MiB", "--assume-batch", "2", "--fixed-costs",
                                                "-o", dir + "/resnet50.dot"});
  ASSERT_EQ(dot.code, 0) << dot.output;
  EXPECT_NE(dot.output.find("2 devices, "), std::string::npos) << dot.output;
  EXPECT_EQ(dot.output.find(" 0 cross-device edges"), std::string::npos) << dot.output;
  std::ifstream in(dir + "/resnet50.dot");
  std::string drawn((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(drawn.find("cpu:0"), std::string::npos);
  EXPECT_NE(drawn.find("cpu:1"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dflow::onnx
