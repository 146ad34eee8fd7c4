// Trains a 784-512-512-10 MLP on Fashion-MNIST with Adam and prints the test accuracy after
// every epoch. --min-accuracy makes the program fail when the final accuracy falls short.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "examples/common/example_util.h"
#include "ops/array_ops.h"
#include "ops/initializers.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "runtime/train/trainer.h"

using namespace dflow;

using examples::Fail;

int main(int argc, char** argv) {
  CLI::App app("Trains an MLP (784-512-512-10) on Fashion-MNIST");
  examples::TrainFlags flags(10);
  tools::Configure(app, "fashion_mnist_mlp");
  flags.AddTo(app, {.mixed_precision = true});
  if (auto code = examples::Parse(app, argc, argv, flags)) return *code;

  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  examples::Params p;
  auto dense = [&](const char* name, Output in, int64_t nin, int64_t nout, uint64_t seed) {
    return examples::Dense(root.WithNameScope(name), p, in, nin, nout, seed);
  };
  auto h1 = ops::Relu(root, dense("dense1", x, 784, 512, flags.seed));
  auto h2 = ops::Relu(root, dense("dense2", h1, 512, 512, flags.seed + 1));
  auto logits =
      ops::Identity(root.WithOpName("logits"), dense("dense3", h2, 512, 10, flags.seed + 2));
  return examples::TrainClassifier(root, p, logits, labels, flags,
                                   "Fashion-MNIST MLP 784-512-512-10");
}
