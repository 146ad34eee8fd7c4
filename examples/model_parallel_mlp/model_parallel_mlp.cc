// Model parallelism: a wide MLP (784-2048-2048-10 with Adam) on two CPU devices that offer
// 72 MiB each. Training it needs about 88 MB: 70 MB of weights and optimizer state, plus each
// weight's gradient (17 MB for the middle layer) while its update runs. No single device can
// hold that, so the placer, which counts variables and peak activations against each device,
// must split it.
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
  double memory_mib = 72;
  int devices = 2;
  bool log_placement = false;
  flags.AddTo(app);
  app.add_option("--width", width, "Units in each hidden layer")->check(CLI::PositiveNumber);
  app.add_option("--device-memory-mib", memory_mib, "Memory each device offers the placer")
      ->check(CLI::PositiveNumber);
  app.add_option("--devices", devices, "Number of CPU devices")->check(CLI::Range(1, 16));
  app.add_flag("--log-placement", log_placement, "Print the device of every node");
  CLI11_PARSE(app, argc, argv);

  Scope root = Scope::NewRootScope();
  examples::Params p;
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  auto dense = [&](const char* name, Output in, int64_t nin, int64_t nout, uint64_t seed) {
    return examples::Dense(root.WithNameScope(name), p, in, nin, nout, seed);
  };
  auto h1 = ops::Relu(root, dense("dense1", x, 784, width, flags.seed));
  auto h2 = ops::Relu(root, dense("dense2", h1, width, width, flags.seed + 1));
  auto logits =
      ops::Identity(root.WithOpName("logits"), dense("dense3", h2, width, 10, flags.seed + 2));
  SessionOptions options;
  for (int i = 0; i < devices; ++i) options.devices.push_back("cpu:" + std::to_string(i));
  options.device_memory_bytes = memory_mib * (1 << 20);
  options.placer.log_placement = log_placement;
  options.placer.costs.unknown_dim = flags.batch_size;  // the placer's estimates use the batch
  auto summary = [&](Session& session) {
    std::printf("placement on %d devices of %.0f MiB each:\n%s\n", devices, memory_mib,
                session.placement().Summary(session.device_set()).c_str());
    for (const auto& line : session.placement().log) std::printf("  %s\n", line.c_str());
  };
  std::string title =
      "Fashion-MNIST, wide MLP 784-" + std::to_string(width) + "-" + std::to_string(width) + "-10";
  return examples::TrainClassifier(root, p, logits, labels, flags, title, options, summary);
}
