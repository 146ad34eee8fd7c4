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
  int epochs = 10;
  int64_t batch_size = 128, max_steps = -1;
  double lr = 1e-3, min_accuracy = 0;
  uint64_t seed = 1;
  int threads = 0;
  std::string data_dir = kFashionMnistDir;
  app.add_option("--epochs", epochs, "Passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "Examples per step")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "Adam learning rate")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "Seed for initialisation and shuffling");
  app.add_option("--max-steps", max_steps,
                 "Stop each epoch after this many steps (shortened runs)");
  app.add_option("--min-accuracy", min_accuracy, "Exit with status 1 below this test accuracy");
  app.add_option("--threads", threads, "CPU threads (0: all cores)");
  app.add_option("--data", data_dir, "Folder with the Fashion-MNIST IDX files");
  CLI11_PARSE(app, argc, argv);

  auto train = LoadFashionMnist(true, data_dir);
  if (!train.ok()) return Fail(train.status());
  auto test = LoadFashionMnist(false, data_dir);
  if (!test.ok()) return Fail(test.status());

  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DType::kF32, Shape{-1, 784});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DType::kI32, Shape{-1});
  examples::Params p;
  auto h1 = ops::Relu(root, Dense(root.WithNameScope("dense1"), p, x, 784, 512, seed));
  auto h2 = ops::Relu(root, Dense(root.WithNameScope("dense2"), p, h1, 512, 512, seed + 1));
  auto logits = ops::Identity(root.WithOpName("logits"),
                              Dense(root.WithNameScope("dense3"), p, h2, 512, 10, seed + 2));
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, labels);
  auto loss = ops::ReduceMean(root.WithOpName("loss"), xent.loss);
  ops::Adam adam({.learning_rate = lr});
  auto step = adam.Minimize(root, loss, p.variables());

  SessionOptions options;
  options.threads.num_threads = threads;
  auto session = Session::Create(root, options);
  if (!session.ok()) return Fail(session.status());
  std::vector<std::string> init = adam.init_targets();
  for (const auto& t : p.init_targets()) init.push_back(t);
  if (Status s = (*session)->Run({}, {}, init).status(); !s.ok()) return Fail(s);

  std::printf("Fashion-MNIST MLP 784-512-512-10: %lld training and %lld test images, batch %lld\n",
              static_cast<long long>(train->size()), static_cast<long long>(test->size()),
              static_cast<long long>(batch_size));
  return examples::TrainAndReport(**session, *train, *test,
                                  {.epochs = epochs,
                                   .batch_size = batch_size,
                                   .max_steps = max_steps,
                                   .seed = seed,
                                   .min_accuracy = min_accuracy,
                                   .loss = loss.name(),
                                   .train_target = step.name(),
                                   .logits = logits.name()});
}
