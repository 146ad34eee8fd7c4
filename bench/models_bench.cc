// Model steps at batch 128, f32, timed after warm-up; scripts/bench.sh compares them with
// PyTorch (and ONNX Runtime for inference):
//   the MLP 784-512-512-10: a training step (forward, backward, SGD update) and inference;
//   the CNN of examples/fashion_mnist_cnn: a training step with SGD;
//   one Adam update of a 2048x2048 variable (the model-parallel MLP's largest), gradient fed.
//   the MLP's training step with a checkpoint every 10 steps, against none.
//   ResNet-50 of examples/resnet50 (CIFAR-10 shapes): a training step with SGD and momentum, at
//   batch DFLOW_BENCH_RESNET_BATCH (default 16: the CPU takes about half a second per 16).
// Training steps also report their peak memory (counters peak_bytes, arena_bytes).
// DFLOW_BENCH_DEVICE (default cpu:0) names the device every session runs on, so the same
// steps time a GPU (scripts/gpu_bench.sh runs them with gpu:0). Every timed step fetches a
// value computed after its update, so a step on a GPU is timed to its end.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "examples/resnet50/resnet.h"
#include "ops/array_ops.h"
#include "ops/conv_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "rewrite/mixed_precision.h"
#include "runtime/session.h"
#include "runtime/train/checkpointer.h"

namespace dflow {
namespace {

constexpr int64_t kBatch = 128;

// The device of every benchmark's session: DFLOW_BENCH_DEVICE, else cpu:0.
SessionOptions BenchOptions() {
  SessionOptions options;
  const char* device = std::getenv("DFLOW_BENCH_DEVICE");
  if (device != nullptr && *device != '\0') options.device = device;
  return options;
}

// A session on the bench device, or the error that stops the program.
// The scope's training graph with its products in bf16 (rewrite/mixed_precision.h).
Scope MixedPrecisionOrDie(const Scope& root) {
  auto mp = ops::MixedPrecision(root.graph(), {.compute = DType::kBF16});
  if (!mp.ok()) {
    std::fprintf(stderr, "models_bench: %s\n", mp.status().ToString().c_str());
    std::exit(1);
  }
  return Scope::ExtendGraph(*mp->graph);
}

std::unique_ptr<Session> CreateOrDie(const Scope& root) {
  auto s = Session::Create(root, BenchOptions());
  if (!s.ok()) {
    std::fprintf(stderr, "models_bench: %s\n", s.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(s).value();
}

// Peak bytes of the last step (variables, the plan's arena and every transient tensor; the fed
// batch is the caller's and not counted) and the arena's size, as benchmark counters.
void ReportMemory(benchmark::State& state, const Session& session) {
  StepStats s = session.last_step_stats();
  state.counters["peak_bytes"] = static_cast<double>(s.peak_bytes);
  state.counters["arena_bytes"] = static_cast<double>(s.memory.arena_bytes);
  state.counters["unplanned_bytes"] = static_cast<double>(s.memory.unplanned_sum);
  state.counters["live_bound_bytes"] = static_cast<double>(s.memory.live_bound);
}

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
    session = CreateOrDie(root);
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
  ReportMemory(state, *m.session);
}

// The MLP's training step with a checkpoint taken every 10 steps (arg 1:
// runtime/train/checkpointer.h, written by its background thread to a temporary folder) against
// none (arg 0): what checkpointing costs the steps.
void BM_MlpTrainCheckpointed(benchmark::State& state) {
  Mlp m(true);
  Session::Feeds feeds = {{"x", m.x}, {"labels", m.labels}};
  std::unique_ptr<Checkpointer> ckpt;
  const std::string dir = fmt::format("/tmp/dflow-bench-checkpoints-{}", getpid());
  if (state.range(0) == 1) {
    auto c = Checkpointer::Create({.dir = dir, .keep = 2});
    if (!c.ok()) {
      state.SkipWithError(c.status().ToString().c_str());
      return;
    }
    ckpt = std::move(c).value();
  }
  for (int i = 0; i < 20; ++i) {
    if (!m.session->Run(feeds, {m.loss.name()}, {m.step.name()}).ok()) std::abort();
  }
  int64_t step = 0;
  for (auto _ : state) {
    auto out = m.session->Run(feeds, {m.loss.name()}, {m.step.name()});
    benchmark::DoNotOptimize(out);
    if (ckpt && ++step % 10 == 0 && !ckpt->Save(*m.session, step).ok()) {
      state.SkipWithError("a checkpoint failed");
      break;
    }
  }
  if (ckpt) {
    if (!ckpt->Flush().ok()) state.SkipWithError("a checkpoint failed");
    state.counters["checkpoints_written"] = static_cast<double>(ckpt->written());
    ckpt.reset();
    std::filesystem::remove_all(dir);
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

// conv 3x3 (32) -> relu -> maxpool -> conv 3x3 (64) -> relu -> maxpool -> dense 128 -> dense 10;
// with `bf16`, its products in bf16 by the mixed-precision rewrite (rewrite/mixed_precision.h).
void CnnTrainStep(benchmark::State& state, bool bf16) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 1, 28, 28});
  auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  std::vector<Output> vars;
  std::vector<std::string> init;
  auto var = [&](const Shape& s, const ops::Initializer& i) {
    auto v = ops::InitializedVariable(root, s, i);
    vars.push_back(v.var);
    init.push_back(v.init.node_name());
    return v.var;
  };
  auto conv = [&](Output in, int64_t cin, int64_t cout, uint64_t seed) {
    auto w = var(Shape{cout, cin, 3, 3}, ops::Initializer::HeNormal(seed));
    auto b = var(Shape{1, cout, 1, 1}, ops::Initializer::Zeros());
    auto h = ops::Add(root, ops::Conv2D(root, in, w, {.pads = {1, 1, 1, 1}}), b);
    return ops::MaxPool(root, ops::Relu(root, h));
  };
  auto h = ops::Flatten(root, conv(conv(x, 1, 32, 1), 32, 64, 2));
  auto w1 = var(Shape{64 * 7 * 7, 128}, ops::Initializer::GlorotUniform(3));
  auto b1 = var(Shape{128}, ops::Initializer::Zeros());
  auto w2 = var(Shape{128, 10}, ops::Initializer::GlorotUniform(4));
  auto b2 = var(Shape{10}, ops::Initializer::Zeros());
  h = ops::Relu(root, ops::BiasAdd(root, ops::MatMul(root, h, w1), b1));
  auto logits = ops::BiasAdd(root, ops::MatMul(root, h, w2), b2);
  auto loss = ops::ReduceMean(root, ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, y).loss);
  ops::SGD sgd({.learning_rate = 0.01});
  auto step = sgd.Minimize(root, loss, vars);
  auto session = CreateOrDie(bf16 ? MixedPrecisionOrDie(root) : root);
  if (!session->Run({}, {}, init).ok()) std::abort();
  Tensor images(DType::kF32, Shape{kBatch, 1, 28, 28}), labels(DType::kI32, Shape{kBatch});
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> pixel(0, 1);
  for (float& v : images.flat<float>()) v = pixel(gen);
  for (int64_t i = 0; i < kBatch; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  Session::Feeds feeds = {{"x", images}, {"labels", labels}};
  for (int i = 0; i < 5; ++i) {
    if (!session->Run(feeds, {loss.name()}, {step.name()}).ok()) std::abort();
  }
  for (auto _ : state) {
    auto out = session->Run(feeds, {loss.name()}, {step.name()});
    benchmark::DoNotOptimize(out);
  }
  ReportMemory(state, *session);
}
void BM_CnnTrainStep(benchmark::State& state) { CnnTrainStep(state, false); }
void BM_CnnTrainStepBf16(benchmark::State& state) { CnnTrainStep(state, true); }

// ResNet-50 (examples/resnet50/resnet.h) at CIFAR-10 shapes: SGD with momentum and the batch
// norms' running statistics, as the example trains it.
// With `bf16`, its products in bf16 by the mixed-precision rewrite (rewrite/mixed_precision.h).
void ResNet50TrainStep(benchmark::State& state, bool bf16) {
  const char* env = std::getenv("DFLOW_BENCH_RESNET_BATCH");
  const int64_t batch = env != nullptr ? std::atoll(env) : 16;
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 3, 32, 32});
  auto y = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  examples::ResNetModel model = examples::BuildResNet(root, x, {});
  auto loss =
      ops::ReduceMean(root, ops::SparseSoftmaxCrossEntropyWithLogits(root, model.logits, y).loss);
  ops::Momentum sgd({.learning_rate = 0.002, .momentum = 0.9});
  auto update = sgd.Minimize(root, loss, model.params.variables());
  std::vector<Output> deps = model.stat_updates;
  deps.push_back(update.node);
  auto step = ops::NoOp(root.WithOpName("train").WithControlDependencies(deps));
  auto session = CreateOrDie(bf16 ? MixedPrecisionOrDie(root) : root);
  std::vector<std::string> init = sgd.init_targets();
  for (const auto& t : model.params.init_targets()) init.push_back(t);
  for (const auto& t : model.running_stats.init_targets()) init.push_back(t);
  if (!session->Run({}, {}, init).ok()) std::abort();
  Tensor images(DType::kF32, Shape{batch, 3, 32, 32}), labels(DType::kI32, Shape{batch});
  std::mt19937 gen(1);
  std::normal_distribution<float> pixel(0, 1);
  for (float& v : images.flat<float>()) v = pixel(gen);
  for (int64_t i = 0; i < batch; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  Session::Feeds feeds = {{"x", images}, {"labels", labels}};
  for (int i = 0; i < 3; ++i) {
    auto out = session->Run(feeds, {loss.name()}, {step.name()});
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      return;
    }
  }
  for (auto _ : state) {
    auto out = session->Run(feeds, {loss.name()}, {step.name()});
    benchmark::DoNotOptimize(out);
  }
  state.counters["batch"] = static_cast<double>(batch);
  ReportMemory(state, *session);
}
void BM_ResNet50TrainStep(benchmark::State& state) { ResNet50TrainStep(state, false); }
void BM_ResNet50TrainStepBf16(benchmark::State& state) { ResNet50TrainStep(state, true); }

// Exposes the update an optimizer adds for one variable, without a loss to differentiate.
class BenchAdam : public ops::Adam {
 public:
  using Adam::Adam;
  Output UpdateOf(const Scope& scope, Output var, Output grad) { return Update(scope, var, grad); }
};

void BM_AdamUpdate(benchmark::State& state) {
  Scope root = Scope::NewRootScope();
  Shape shape{2048, 2048};
  auto grad = ops::Placeholder(root.WithOpName("grad"), DType::kF32, shape);
  auto w = ops::InitializedVariable(root, shape, ops::Initializer::GlorotUniform(1));
  BenchAdam adam(ops::Adam::Options{});
  auto update = adam.UpdateOf(root, w.var, grad);
  auto session = CreateOrDie(root);
  std::vector<std::string> init = adam.init_targets();
  init.push_back(w.init.node_name());
  if (!session->Run({}, {}, init).ok()) std::abort();
  Tensor g(DType::kF32, shape);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0, 1e-3f);
  for (float& v : g.flat<float>()) v = normal(gen);
  Session::Feeds feeds = {{"grad", g}};
  for (int i = 0; i < 5; ++i) {
    if (!session->Run(feeds, {}, {update.node_name()}).ok()) std::abort();
  }
  for (auto _ : state) {
    auto out = session->Run(feeds, {}, {update.node_name()});
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * shape.num_elements());
}

BENCHMARK(BM_CnnTrainStep)->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_CnnTrainStepBf16)->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_MlpTrainStep)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_MlpInference)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_MlpTrainCheckpointed)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_AdamUpdate)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_ResNet50TrainStep)->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_ResNet50TrainStepBf16)->Unit(benchmark::kMillisecond)->MinTime(3.0);

}  // namespace
}  // namespace dflow

BENCHMARK_MAIN();
