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
#include "runtime/trainer.h"

using namespace dflow;

using examples::Fail;

// A dense layer: Glorot-initialised weights and zero bias, registered in `p`.
Output Dense(const Scope& scope, examples::Params& p, Output in, int64_t n_in, int64_t n_out,
             uint64_t seed) {
  Output w =
      p.Add(scope.WithOpName("w"), Shape{n_in, n_out}, ops::Initializer::GlorotUniform(seed));
  Output b = p.Add(scope.WithOpName("b"), Shape{n_out}, ops::Initializer::Zeros());
  return ops::BiasAdd(scope, ops::MatMul(scope, in, w), b);
}

int main(int argc, char** argv) {
  CLI::App app("Trains an MLP (784-512-512-10) on Fashion-MNIST");
  examples::TrainFlags flags(10);
  flags.AddTo(app);
  CLI11_PARSE(app, argc, argv);

  auto train = LoadFashionMnist(true, flags.data_dir);
  if (!train.ok()) return Fail(train.status());
  auto test = LoadFashionMnist(false, flags.data_dir);
  if (!test.ok()) return Fail(test.status());

  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  examples::Params p;
  auto h1 = ops::Relu(root, Dense(root.WithNameScope("dense1"), p, x, 784, 512, flags.seed));
  auto h2 = ops::Relu(root, Dense(root.WithNameScope("dense2"), p, h1, 512, 512, flags.seed + 1));
  auto logits = ops::Identity(root.WithOpName("logits"),
                              Dense(root.WithNameScope("dense3"), p, h2, 512, 10, flags.seed + 2));
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, labels);
  auto loss = ops::ReduceMean(root.WithOpName("loss"), xent.loss);
  ops::Adam adam({.learning_rate = flags.lr});
  auto step = adam.Minimize(root, loss, p.variables());

  auto session = examples::CreateInitializedSession(root, flags, p, adam);
  if (!session.ok()) return Fail(session.status());

  std::printf("Fashion-MNIST MLP 784-512-512-10: %lld training and %lld test images, batch %lld\n",
              static_cast<long long>(train->size()), static_cast<long long>(test->size()),
              static_cast<long long>(flags.batch_size));
  return examples::TrainAndReport(
      **session, *train, *test, flags,
      {.loss = loss.name(), .train_target = step.name(), .logits = logits.name()});
}
