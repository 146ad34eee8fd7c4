// The MLP 784-512-512-10 at batch 128, f32: one training step (forward, backward, SGD update)
// and one inference step, timed after warm-up. Compared with PyTorch by scripts/bench.sh.
#include <benchmark/benchmark.h>

#include <random>

#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "runtime/session.h"

namespace dflow {
namespace {

constexpr int64_t kBatch = 128;

struct Mlp {
  Scope root = Scope::NewRootScope();
  Output logits, loss;
  ops::Operation step;
  std::vector<std::string> init;
  std::unique_ptr<Session> session;
  Tensor x{DType::kF32, Shape{kBatch, 784}}, labels{DType::kI32, Shape{kBatch}};

  explicit Mlp(bool train) {
    auto px = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
    auto py = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
    std::vector<Output> vars;
    Output h = px;
    int64_t sizes[] = {784, 512, 512, 10};
    for (int l = 0; l < 3; ++l) {
      auto w = ops::InitializedVariable(root, Shape{sizes[l], sizes[l + 1]},
                                        ops::Initializer::GlorotUniform(l + 1));
      auto b = ops::InitializedVariable(root, Shape{sizes[l + 1]}, ops::Initializer::Zeros());
      init.push_back(w.init.node_name());
      init.push_back(b.init.node_name());
      vars.push_back(w.var);
      vars.push_back(b.var);
      h = ops::BiasAdd(root, ops::MatMul(root, h, w.var), b.var);
      if (l < 2) h = ops::Relu(root, h);
    }
    logits = h;
    if (train) {
      loss = ops::ReduceMean(root, ops::SparseSoftmaxCrossEntropyWithLogits(root, h, py).loss);
      ops::SGD sgd({.learning_rate = 0.01});
      step = sgd.Minimize(root, loss, vars);
    }
    auto s = Session::Create(root);
    if (!s.ok()) std::abort();
    session = std::move(s).value();
    if (!session->Run({}, {}, init).ok()) std::abort();
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> pixel(0, 1);
    for (float& v : x.flat<float>()) v = pixel(gen);
    for (int64_t i = 0; i < kBatch; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  }
};

void BM_MlpTrainStep(benchmark::State& state) {
  Mlp m(true);
  Session::Feeds feeds = {{"x", m.x}, {"labels", m.labels}};
  for (int i = 0; i < 20; ++i) {
    if (!m.session->Run(feeds, {m.loss.name()}, {m.step.name()}).ok()) std::abort();
  }
  for (auto _ : state) {
    auto out = m.session->Run(feeds, {m.loss.name()}, {m.step.name()});
    benchmark::DoNotOptimize(out);
  }
}

void BM_MlpInference(benchmark::State& state) {
  Mlp m(false);
  Session::Feeds feeds = {{"x", m.x}};
  for (int i = 0; i < 20; ++i) {
    if (!m.session->Run(feeds, {m.logits.name()}).ok()) std::abort();
  }
  for (auto _ : state) {
    auto out = m.session->Run(feeds, {m.logits.name()});
    benchmark::DoNotOptimize(out);
  }
}

BENCHMARK(BM_MlpTrainStep)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_MlpInference)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
}  // namespace dflow

BENCHMARK_MAIN();
