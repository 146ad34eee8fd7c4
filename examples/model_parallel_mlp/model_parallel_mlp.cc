// Model parallelism: a wide MLP (784-2048-2048-10 with Adam: 70 MB of weights and optimizer
// state) on two CPU devices that offer 64 MiB each, so no single device can hold it.
// The placer splits the layers between cpu:0 and cpu:1; the session partitions the graph and
// joins the halves with Send/Recv. Prints the placement summary, then trains on Fashion-MNIST.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "examples/common/example_util.h"
#include "ops/array_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"

using namespace dflow;
using examples::Fail;

int main(int argc, char** argv) {
  CLI::App app("Trains a wide MLP split by the placer across two CPU devices");
  examples::TrainFlags flags(1);
  int64_t width = 2048;
  double memory_mib = 64;
  int devices = 2;
  bool log_placement = false;
  flags.AddTo(app);
  app.add_option("--width", width, "Units in each hidden layer")->check(CLI::PositiveNumber);
  app.add_option("--device-memory-mib", memory_mib, "Memory each device offers the placer")
      ->check(CLI::PositiveNumber);
  app.add_option("--devices", devices, "Number of CPU devices")->check(CLI::Range(1, 16));
  app.add_flag("--log-placement", log_placement, "Print the device of every node");
  CLI11_PARSE(app, argc, argv);

  auto train = LoadFashionMnist(true, flags.data_dir);
  if (!train.ok()) return Fail(train.status());
  auto test = LoadFashionMnist(false, flags.data_dir);
  if (!test.ok()) return Fail(test.status());

  Scope root = Scope::NewRootScope();
  examples::Params p;
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  auto dense = [&](const std::string& name, Output in, int64_t nin, int64_t nout, uint64_t s) {
    Scope sc = root.WithNameScope(name);
    Output w = p.Add(sc.WithOpName("w"), Shape{nin, nout}, ops::Initializer::GlorotUniform(s));
    Output b = p.Add(sc.WithOpName("b"), Shape{nout}, ops::Initializer::Zeros());
    return ops::BiasAdd(sc, ops::MatMul(sc, in, w), b);
  };
  auto h1 = ops::Relu(root, dense("dense1", x, 784, width, flags.seed));
  auto h2 = ops::Relu(root, dense("dense2", h1, width, width, flags.seed + 1));
  auto logits =
      ops::Identity(root.WithOpName("logits"), dense("dense3", h2, width, 10, flags.seed + 2));
  auto loss = ops::ReduceMean(root.WithOpName("loss"),
                              ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, labels).loss);
  ops::Adam adam({.learning_rate = flags.lr});
  auto step = adam.Minimize(root, loss, p.variables());

  SessionOptions options;
  for (int i = 0; i < devices; ++i) options.devices.push_back("cpu:" + std::to_string(i));
  options.device_memory_bytes = memory_mib * (1 << 20);
  options.placer.log_placement = log_placement;
  auto session = examples::CreateInitializedSession(root, flags, p, adam, options);
  if (!session.ok()) return Fail(session.status());

  const PlacementReport& placement = (*session)->placement();
  std::printf("placement on %d devices of %.0f MiB each:\n%s\n", devices, memory_mib,
              placement.Summary((*session)->device_set()).c_str());
  for (const auto& line : placement.log) std::printf("  %s\n", line.c_str());
  std::printf("Fashion-MNIST, wide MLP 784-%lld-%lld-10, batch %lld\n",
              static_cast<long long>(width), static_cast<long long>(width),
              static_cast<long long>(flags.batch_size));
  return examples::TrainAndReport(
      **session, *train, *test, flags,
      {.loss = loss.name(), .train_target = step.name(), .logits = logits.name()});
}
