// The examples' models trained a few steps on the GPU against the same steps on the CPU: the MLP
// (784-512-512-10, SGD) and the CNN of examples/fashion_mnist_cnn (SGD with momentum, batch
// 64), loss by loss and, after the last step, weight by weight. Skipped without a GPU (failed
// where DFLOW_REQUIRE_GPU is set).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gpu_required.h"
#include "ops/array_ops.h"
#include "ops/conv_ops.h"
#include "ops/cuda/cuda_device.h"
#include "ops/initializers.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/unary_ops.h"
#include "runtime/session.h"
#include "test_util.h"

namespace dflow {
namespace {

// A model's training graph: its loss, its update target, its variables and a batch.
struct Model {
  Scope root = Scope::NewRootScope();
  Output loss;
  std::string step;
  std::vector<Output> vars;
  std::vector<std::string> init;
  Session::Feeds feeds;

  Output Var(const Shape& s, const ops::Initializer& i) {
    auto v = ops::InitializedVariable(root, s, i);
    vars.push_back(v.var);
    init.push_back(v.init.node_name());
    return v.var;
  }
};

Tensor Uniform(const Shape& shape, uint32_t seed) {
  Tensor t(DType::kF32, shape);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(0, 1);
  for (float& v : t.flat<float>()) v = u(gen);
  return t;
}

Tensor Labels(int64_t n) {
  Tensor t(DType::kI32, Shape{n});
  for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 10);
  return t;
}

void BuildMlp(Model& m) {
  Scope& root = m.root;
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
  auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  Output h = x;
  int64_t width = 784;
  for (int64_t out : {512, 512}) {
    auto w = m.Var(Shape{width, out}, ops::Initializer::GlorotUniform(static_cast<uint64_t>(out)));
    auto b = m.Var(Shape{out}, ops::Initializer::Zeros());
    h = ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, h, w), b));
    width = out;
  }
  auto w = m.Var(Shape{width, 10}, ops::Initializer::GlorotUniform(9));
  auto b = m.Var(Shape{10}, ops::Initializer::Zeros());
  auto logits = ops::BiasAdd(root, ops::MatMul(root, h, w), b);
  m.loss = ops::ReduceMean(root, ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, y).loss);
  // Plain SGD: Adam's steps are about lr wherever a gradient is near zero, whatever its size, so
  // rounding differences between the devices would flip them.
  ops::SGD sgd({.learning_rate = 0.1});
  m.step = sgd.Minimize(root, m.loss, m.vars).name();
  m.feeds = {{"x", Uniform(Shape{64, 784}, 1)}, {"labels", Labels(64)}};
}

void BuildCnn(Model& m) {
  Scope& root = m.root;
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 1, 28, 28});
  auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  auto conv = [&](Output in, int64_t cin, int64_t cout, uint64_t seed) {
    auto w = m.Var(Shape{cout, cin, 3, 3}, ops::Initializer::HeNormal(seed));
    auto b = m.Var(Shape{1, cout, 1, 1}, ops::Initializer::Zeros());
    auto h = ops::Add(root, ops::Conv2D(root, in, w, {.pads = {1, 1, 1, 1}}), b);
    return ops::MaxPool(root, ops::Relu(root, h));
  };
  auto h = ops::Flatten(root, conv(conv(x, 1, 32, 1), 32, 64, 2));
  auto w1 = m.Var(Shape{64 * 7 * 7, 128}, ops::Initializer::GlorotUniform(3));
  auto b1 = m.Var(Shape{128}, ops::Initializer::Zeros());
  auto w2 = m.Var(Shape{128, 10}, ops::Initializer::GlorotUniform(4));
  auto b2 = m.Var(Shape{10}, ops::Initializer::Zeros());
  h = ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, h, w1), b1));
  auto logits = ops::BiasAdd(root, ops::MatMul(root, h, w2), b2);
  m.loss = ops::ReduceMean(root, ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, y).loss);
  ops::Momentum momentum({.learning_rate = 0.01, .momentum = 0.9});
  m.step = momentum.Minimize(root, m.loss, m.vars).name();
  for (const auto& t : momentum.init_targets()) m.init.push_back(t);  // the accumulators
  m.feeds = {{"x", Uniform(Shape{64, 1, 28, 28}, 2)}, {"labels", Labels(64)}};
}

// The losses of `steps` training steps of the model on `device`, then its variables.
struct Trained {
  std::vector<double> losses;
  std::vector<Tensor> vars;
};
Trained Train(void (*build)(Model&), const std::string& device, int steps) {
  Model m;
  build(m);
  EXPECT_TRUE(m.root.ok()) << m.root.status().ToString();
  SessionOptions options;
  options.device = device;
  options.calibrate_devices = false;
  auto session = Session::Create(m.root, options);
  EXPECT_TRUE(session.ok()) << session.status().ToString();
  if (!session.ok()) return {};
  auto init = (*session)->Run({}, {}, m.init);
  EXPECT_TRUE(init.ok()) << init.status().ToString();
  Trained t;
  for (int i = 0; i < steps; ++i) {
    auto out = (*session)->Run(m.feeds, {m.loss.name()}, {m.step});
    EXPECT_TRUE(out.ok()) << device << " step " << i << ": " << out.status().ToString();
    if (!out.ok()) return t;
    t.losses.push_back(out->at(0).data<float>()[0]);
  }
  std::vector<std::string> names;
  for (const auto& v : m.vars) names.push_back(v.name());
  auto vars = (*session)->Run({}, names);
  EXPECT_TRUE(vars.ok()) << vars.status().ToString();
  if (vars.ok()) t.vars = *vars;
  return t;
}

class GpuTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    DFLOW_SKIP_WITHOUT_GPU(CudaDeviceCount(&why), why);
  }

  // The model's GPU steps against its CPU steps: every loss within `tol` (relative), and every
  // variable after the last step.
  static void ExpectTrainsAsOnTheCpu(void (*build)(Model&), int steps, double tol) {
    Trained cpu = Train(build, "cpu:0", steps);
    Trained gpu = Train(build, "gpu:0", steps);
    ASSERT_EQ(cpu.losses.size(), static_cast<size_t>(steps));
    ASSERT_EQ(gpu.losses.size(), static_cast<size_t>(steps));
    for (int i = 0; i < steps; ++i) {
      EXPECT_TRUE(std::isfinite(gpu.losses[i])) << "step " << i;
      EXPECT_NEAR(gpu.losses[i], cpu.losses[i], tol * std::max(1.0, std::abs(cpu.losses[i])))
          << "loss of step " << i;
    }
    EXPECT_LT(gpu.losses.back(), gpu.losses.front()) << "the loss did not fall on the GPU";
    ASSERT_EQ(gpu.vars.size(), cpu.vars.size());
    for (size_t v = 0; v < cpu.vars.size(); ++v) {
      const float* g = gpu.vars[v].data<float>();
      const float* c = cpu.vars[v].data<float>();
      double worst = 0;
      for (int64_t i = 0; i < cpu.vars[v].num_elements(); ++i) {
        worst =
            std::max(worst, std::abs(double{g[i]} - c[i]) / std::max(1.0, std::abs(double{c[i]})));
      }
      EXPECT_LE(worst, 10 * tol) << "variable " << v << " after " << steps << " steps";
    }
  }
};

TEST_F(GpuTrainingTest, TheMlpTrainsAsOnTheCpuStepByStep) {
  ExpectTrainsAsOnTheCpu(BuildMlp, 8, 1e-4);
}

TEST_F(GpuTrainingTest, TheCnnTrainsAsOnTheCpuStepByStep) {
  ExpectTrainsAsOnTheCpu(BuildCnn, 8, 1e-4);
}

}  // namespace
}  // namespace dflow
